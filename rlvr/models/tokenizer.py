"""A byte-level tokenizer built locally with `tokenizers`: no download, any text encodes.

Every byte is one token (BPE with no merges over the byte-level alphabet), so digits are single
tokens, which is what a tiny model needs to learn arithmetic. Wrapped as a
`PreTrainedTokenizerFast`, it saves and reloads with ``save_pretrained`` / ``AutoTokenizer``.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<s>", "</s>"

# A minimal chat template so chat-style prompts work with the embedded model too.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with ``<pad>``, ``<s>`` and ``</s>``; vocabulary size 259."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS] + sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS,
        padding_side="left",  # generation appends on the right
        chat_template=CHAT_TEMPLATE,
    )
