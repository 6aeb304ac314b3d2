"""transformers5.py: a config.json as transformers 5 saves the same model.

saved_by_5(config, model_type, defaults) turns a transformers 4 config
(top-level rope_theta, rope_scaling, partial_rotary_factor, and the per
layer kind keys of Gemma 3 and ModernBERT) into the one transformers 5
writes, following the rules of transformers 5.15's RotaryEmbeddingConfigMixin
as its documentation and source describe them (written here, not copied):

- rope_parameters replaces rope_scaling and rope_theta, which are not
  written again; the dict starts as rope_scaling's, and its rope_theta is
  set (when the dict has none) from the old rope_theta, else the class's
  default;
- rope_type is set from rope_type, else the old "type" (which stays),
  else "default";
- partial_rotary_factor, when the class or the file has one, is copied
  into the dict and stays at the top level too (GPT-NeoX's rotary_pct and
  rotary_emb_base are moved into it and leave the top level);
- llama3, yarn and longrope get original_max_position_embeddings from
  max_position_embeddings where they have none (Phi-3: its top-level one);
- Gemma 3 and ModernBERT keep one dict per layer type, full_attention and
  sliding_attention: Gemma 3's full layers take rope_theta and rope_scaling,
  its sliding ones rope_local_base_freq; ModernBERT's take global_rope_theta
  and local_rope_theta (rope_scaling into both);
- transformers_version says 5.

defaults are the class's (families.py's CLASS_DEFAULTS for the type), for
what the file leaves out, as transformers 4 read it: the saved file then
describes the very model the old one did.
"""

import copy

# the per layer kind types: (full layers' key, sliding layers' key)
PER_LAYER = {"gemma3_text": ("rope_theta", "rope_local_base_freq"),
             "modernbert": ("global_rope_theta", "local_rope_theta")}
# the classes that set partial_rotary_factor themselves when the file does not
PARTIAL = {"glm": 0.5, "glm4": 0.5, "phi3": 1.0}


def standardize(d, c, model_type, defaults):
    d.setdefault("rope_type", d.get("type", "default"))
    if d["rope_type"] in ("llama3", "yarn", "longrope"):
        if model_type == "phi3" and "original_max_position_embeddings" in c:
            d["original_max_position_embeddings"] = c["original_max_position_embeddings"]
        else:
            d.setdefault("original_max_position_embeddings",
                         c.get("max_position_embeddings",
                               defaults.get("max_position_embeddings")))


def saved_by_5(config, model_type, defaults):
    c = copy.deepcopy(config)
    c["transformers_version"] = "5.15.0"
    sc = c.pop("rope_scaling", defaults.get("rope_scaling"))
    if model_type in PER_LAYER:
        full_key, slide_key = PER_LAYER[model_type]
        rp = {"full_attention": {"rope_type": "default"},
              "sliding_attention": {"rope_type": "default"}}
        if sc:
            for kind in (("full_attention",) if model_type == "gemma3_text" else rp):
                rp[kind].update(sc)
        for kind, key in (("full_attention", full_key), ("sliding_attention", slide_key)):
            v = c.pop(key, defaults.get(key))
            if v is None:  # ModernBERT's local_rope_theta null: the global one
                v = rp["full_attention"]["rope_theta"]
            rp[kind].setdefault("rope_theta", v)
            standardize(rp[kind], c, model_type, defaults)
    else:
        rp = dict(sc or {})
        if model_type == "gpt_neox":
            # either spelling: the older names, or those transformers 4 later read
            for new, old in (("rope_theta", "rotary_emb_base"),
                             ("partial_rotary_factor", "rotary_pct")):
                a, b = c.pop(new, None), c.pop(old, None)
                rp.setdefault(new, a if a is not None else b if b is not None else
                              defaults.get(old))
        else:
            rp.setdefault("rope_theta", c.pop("rope_theta", defaults.get("rope_theta")))
        partial = c.get("partial_rotary_factor", PARTIAL.get(model_type))
        if partial is not None:
            rp.setdefault("partial_rotary_factor", partial)
            if model_type != "phi3":
                c["partial_rotary_factor"] = partial
        standardize(rp, c, model_type, defaults)
    c["rope_parameters"] = rp
    return c
