"""
modeling_siamese_gpt2.py: GPT-2 with a Post-Norm or a SiameseNorm residual stream, as a Hugging Face
transformers model. dev/export_hf.py copies this file into the folder of an exported post or
siamese checkpoint and names its two classes in config.json ("auto_map"), so that

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

builds it, and model(...), model.generate(...) and lm-eval's "hf" model work on it. (A pre-mode
checkpoint is plain GPT-2 and is exported as transformers' own GPT2LMHeadModel instead.)

The model is the one the C, CUDA and PyTorch trainers compute (dev/MODEL.md, "Forward pass"):

    e = wte[token] + wpe[position]
    post:     x = e
              per sublayer:  x = LN(x + F(x); ln)
              h = LN(x; lnf)
    siamese:  x = e;  y = e
              per sublayer:  a = LN(x; lnx)            X is re-normalised before every sublayer
                             u = LN(a + LN(y; lny); ln)  the block input sees both streams
                             z = F(u)                    the block runs once for both
                             x = a + z / c_l             X takes the update damped by c_l = sqrt(2 (l + 1))
                             y = y + z                   Y takes it whole
              h = LN(LN(x; lnfx) + LN(y; lnfy); lnf)
    logits = h @ wte^T                                   the output layer is the token embedding

Each layer l has two sublayers, attention (F = Attn_l, LayerNorms ln1, lnx1, lny1) then MLP
(F = MLP_l, ln2, lnx2, lny2). Attn_l is causal multi-head softmax attention with scale
1/sqrt(C/NH) between a qkv projection (C -> 3C, rows [q | k | v], heads contiguous) and an output
projection (C -> C); MLP_l is fc (C -> 4C), GELU (tanh approximation), fcproj (4C -> C). Every
LayerNorm has eps 1e-5. The weight matrices keep the trainer's (out, in) layout (nn.Linear's).

What forward() supports, as transformers' causal LMs do: input_ids; attention_mask (B, S), 1 for a
real token and 0 for padding, S covering the cached and the new positions; position_ids (by default
each row counts its real tokens, so a left-padded row gets the positions it would have alone);
a KV cache (transformers' Cache, under the name `cache` or `past_key_values`: the attention keys
and values are the only state one position leaves for the next, since everything else in both
modes works position by position); labels -> the mean next-token cross-entropy (-100 ignored);
return_dict. It refuses, with an error that says so, what it does not implement:
output_attentions, output_hidden_states, inputs_embeds, legacy tuple caches.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

NORM_MODES = ("post", "siamese")  # the modes this file implements (pre is transformers' GPT2LMHeadModel)
# the field of the output that holds the cache: "cache" in newer transformers, "past_key_values" before
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class SiameseGPT2Config(PretrainedConfig):
    """The sizes of the model (the trainer's checkpoint header) and its norm mode."""

    model_type = "siamese_gpt2"

    def __init__(self, vocab_size=50257, max_position_embeddings=1024, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, norm_mode="siamese", layer_norm_eps=1e-5, initializer_range=0.02,
                 use_cache=True, bos_token_id=None, eos_token_id=None, **kwargs):
        if norm_mode not in NORM_MODES:
            raise ValueError(f"norm_mode {norm_mode!r}: this model implements {', '.join(NORM_MODES)} "
                             "(a pre-mode model is transformers' GPT2LMHeadModel)")
        if hidden_size % num_attention_heads != 0:
            raise ValueError(f"hidden_size {hidden_size} does not split into {num_attention_heads} heads")
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.norm_mode = norm_mode
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        kwargs.setdefault("tie_word_embeddings", False)  # no separate output layer to tie: logits use wte itself
        super().__init__(**kwargs)


class CausalSelfAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        C = config.hidden_size
        self.n_head = config.num_attention_heads
        self.layer_idx = layer_idx  # where this layer's keys and values sit in the cache
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.proj.writes_residual = True  # initialised smaller (_init_weights)

    def forward(self, u, allowed, cache):
        """u (B, T, C) -> (B, T, C). allowed (B, 1, T, S): may query t see key s (S = cached + T)."""
        B, T, C = u.shape
        hs = C // self.n_head
        q, k, v = self.qkv(u).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)  # the keys and values of all S positions
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        # a masked score gets the lowest finite value, not -inf: a row with nothing to see (a padding
        # query) then comes out finite instead of NaN, and is ignored by whoever padded it
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.hidden_size
        self.fc = nn.Linear(C, 4 * C)
        self.proj = nn.Linear(4 * C, C)
        self.proj.writes_residual = True

    def forward(self, u):
        return self.proj(F.gelu(self.fc(u), approximate="tanh"))


class Block(nn.Module):
    """Layer l: the attention sublayer, then the MLP sublayer, wired by the norm mode."""

    def __init__(self, config, layer_idx):
        super().__init__()
        C, eps = config.hidden_size, config.layer_norm_eps
        self.mode = config.norm_mode
        self.attn = CausalSelfAttention(config, layer_idx)
        self.mlp = MLP(config)
        self.ln1 = nn.LayerNorm(C, eps=eps)  # post: the LN after the add; siamese: the block input's LN
        self.ln2 = nn.LayerNorm(C, eps=eps)
        if self.mode == "siamese":
            self.lnx1, self.lny1 = nn.LayerNorm(C, eps=eps), nn.LayerNorm(C, eps=eps)
            self.lnx2, self.lny2 = nn.LayerNorm(C, eps=eps), nn.LayerNorm(C, eps=eps)
        self.c = math.sqrt(2 * (layer_idx + 1))  # c_l, how much X damps the block output (siamese)

    def sublayer(self, f, ln, lnx, lny, x, y):
        if self.mode == "post":
            return ln(x + f(x)), None
        if self.mode == "siamese":
            a = lnx(x)
            z = f(ln(a + lny(y)))
            return a + z / self.c, y + z
        raise ValueError(f"unknown norm mode {self.mode!r}")

    def forward(self, x, y, allowed, cache):
        attn = lambda u: self.attn(u, allowed, cache)
        x, y = self.sublayer(attn, self.ln1, getattr(self, "lnx1", None), getattr(self, "lny1", None), x, y)
        x, y = self.sublayer(self.mlp, self.ln2, getattr(self, "lnx2", None), getattr(self, "lny2", None), x, y)
        return x, y


class SiameseGPT2PreTrainedModel(PreTrainedModel):
    config_class = SiameseGPT2Config
    base_model_prefix = "transformer"
    _no_split_modules = ["Block"]
    _supports_cache_class = True  # generate() hands forward() a Cache (older transformers ask)

    def _init_weights(self, module):
        """GPT-2's recipe, as the trainer's fresh models (for a model built without weights): N(0, 0.02),
        the two projections that write into the residual streams N(0, 0.02 / sqrt(2L)), biases 0,
        LayerNorms weight 1 and bias 0."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            if getattr(module, "writes_residual", False):
                std = std / math.sqrt(2 * self.config.num_hidden_layers)
            nn.init.normal_(module.weight, 0.0, std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


class SiameseGPT2Model(SiameseGPT2PreTrainedModel):
    """From tokens to h, the final LayerNorm's output (B, T, C)."""

    def __init__(self, config):
        super().__init__(config)
        C, eps = config.hidden_size, config.layer_norm_eps
        self.wte = nn.Embedding(config.vocab_size, C)
        self.wpe = nn.Embedding(config.max_position_embeddings, C)
        self.h = nn.ModuleList([Block(config, l) for l in range(config.num_hidden_layers)])
        self.lnf = nn.LayerNorm(C, eps=eps)
        if config.norm_mode == "siamese":
            self.lnfx, self.lnfy = nn.LayerNorm(C, eps=eps), nn.LayerNorm(C, eps=eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.wte

    def set_input_embeddings(self, value):
        self.wte = value

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None):
        B, T = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        S = past + T
        if attention_mask is None:
            attention_mask = torch.ones(B, S, dtype=torch.long, device=input_ids.device)
        if attention_mask.dim() != 2 or attention_mask.shape != (B, S):
            raise ValueError(f"attention_mask must be (batch, cached + new positions) = ({B}, {S}), "
                             f"got {tuple(attention_mask.shape)}")
        keep = attention_mask.bool()
        if position_ids is None:  # each row counts its own real tokens (left padding moves nothing)
            position_ids = (keep.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        if int(position_ids.max()) >= self.config.max_position_embeddings:
            raise ValueError(f"position {int(position_ids.max())} is past the model's "
                             f"{self.config.max_position_embeddings} positions (the trainer's maxT)")
        # query t (position past + t) may see key s if s is not in its future and is a real token
        causal = torch.ones(T, S, dtype=torch.bool, device=input_ids.device).tril(diagonal=past)
        allowed = causal[None, None, :, :] & keep[:, None, None, :]

        x = self.wte(input_ids) + self.wpe(position_ids)
        y = x if self.config.norm_mode == "siamese" else None  # both streams start as the embedding
        for block in self.h:
            x, y = block(x, y, allowed, cache)
        if self.config.norm_mode == "post":
            return self.lnf(x)
        if self.config.norm_mode == "siamese":
            return self.lnf(self.lnfx(x) + self.lnfy(y))  # merge the streams, then the final LN
        raise ValueError(f"unknown norm mode {self.config.norm_mode!r}")


class SiameseGPT2ForCausalLM(SiameseGPT2PreTrainedModel, GenerationMixin):
    """The causal LM: logits over the V tokens of the vocabulary (the trainer's padding rows left out)."""

    def __init__(self, config):
        super().__init__(config)
        self.transformer = SiameseGPT2Model(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.transformer.wte

    def set_input_embeddings(self, value):
        self.transformer.wte = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, past_key_values=None,
                labels=None, use_cache=None, return_dict=None, inputs_embeds=None, output_attentions=None,
                output_hidden_states=None, **kwargs):
        # cache_position (which older generate() passes) says where the new tokens go; the cache's
        # own length says the same
        kwargs.pop("cache_position", None)
        unsupported = {"inputs_embeds": inputs_embeds, "output_attentions": output_attentions,
                       "output_hidden_states": output_hidden_states, **kwargs}
        asked = [name for name, value in unsupported.items() if value is not None and value is not False]
        if asked:
            raise NotImplementedError(f"{type(self).__name__} does not support {', '.join(asked)} "
                                      "(see the header of modeling_siamese_gpt2.py)")
        if input_ids is None:
            raise ValueError("input_ids is required")
        if cache is not None and past_key_values is not None:
            raise ValueError("give the KV cache once, as cache or as past_key_values")
        cache = cache if cache is not None else past_key_values
        if cache is not None and not isinstance(cache, Cache):
            raise TypeError(f"the KV cache must be a transformers Cache (DynamicCache), not {type(cache).__name__}")
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if use_cache and cache is None:
            cache = DynamicCache()
        elif not use_cache:
            cache = None

        h = self.transformer(input_ids, attention_mask, position_ids, cache)
        logits = F.linear(h, self.transformer.wte.weight)  # tied: the output layer is the token embedding

        loss = None
        if labels is not None:  # position t predicts token t + 1
            V = logits.size(-1)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), labels[:, 1:].reshape(-1).to(logits.device),
                                   ignore_index=-100)
        output = CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: cache})
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()
