from compression.config import RequestControls
from compression.controls import Controls, parse_controls

ALLOWED = RequestControls(enabled=True, allowed=["bypass", "target"], max_target_tokens=5000)


def test_controls_are_ignored_unless_the_route_enables_them() -> None:
    assert parse_controls("bypass, target=100", RequestControls()) == Controls()
    assert parse_controls("bypass", RequestControls(enabled=True)) == Controls()  # nothing allowed


def test_bypass_and_target_are_parsed_case_insensitively() -> None:
    assert parse_controls(" BYPASS ", ALLOWED) == Controls(bypass=True)
    assert parse_controls("target=1200", ALLOWED) == Controls(target_tokens=1200)
    assert parse_controls("Target=1200,bypass", ALLOWED) == Controls(
        bypass=True, target_tokens=1200
    )


def test_target_is_clamped_and_invalid_targets_ignored() -> None:
    assert parse_controls("target=999999", ALLOWED).target_tokens == 5000
    for value in ("target=0", "target=-3", "target=abc", "target="):
        assert parse_controls(value, ALLOWED).target_tokens is None
    unclamped = RequestControls(enabled=True, allowed=["target"], max_target_tokens=0)
    assert parse_controls("target=999999", unclamped).target_tokens == 999999


def test_only_allowed_names_are_honoured() -> None:
    only_target = RequestControls(enabled=True, allowed=["target"])
    assert parse_controls("bypass,target=10", only_target) == Controls(target_tokens=10)
    assert parse_controls("namespace=x,key=y", ALLOWED) == Controls()
