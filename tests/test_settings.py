"""Typed settings (zofl.settings): every key declared once in a group; the code reads only declared keys.

A mistyped ``cfg.<attr>`` would fail only on its code path at run time; these tests read the source
instead, so a typo or a key a method reads without declaring it fails here."""
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from zofl.config import ConfigError, key_by_name, keys, parse_config
from zofl.methods import METHODS
from zofl.settings import ENGINE_GROUPS, Clients, EngineSettings, Run, TaskSettings

ZOFL = Path(__file__).resolve().parent.parent / "zofl"
DICT_METHODS = {"get", "items", "keys", "values", "copy", "update", "pop", "setdefault"}
READ = re.compile(r"(?<![\w.])(?:self\.|run\.|self\.run\.)?cfg\.([a-z_][a-z0-9_]*)")


def _reads(path: Path, pattern: re.Pattern = READ) -> set[str]:
    return {m.group(1) for m in pattern.finditer(path.read_text())} - DICT_METHODS


ITEM = re.compile(r"""(?<![\w.])(?:self\.|run\.|self\.run\.|method\.)?cfg(?:\[|\.get\()\s*["']([a-z0-9-]+)["']""")


def test_every_cfg_attribute_read_in_the_package_is_a_typed_field_of_the_keys_every_run_has():
    """``cfg.<attr>`` anywhere in zofl/ is a declared field of ``EngineSettings`` (Config has no __getattr__: a
    method's own key is read through its Params); ``cfg["key"]`` / ``cfg.get("key")`` anywhere is a declared key,
    and outside zofl/methods/ one that every run has (no package reads a method's key behind READ_BY's back)."""
    engine_fields = {k.field for k in EngineSettings.keys()}
    bad = {str(p.relative_to(ZOFL)): sorted(_reads(p) - engine_fields) for p in ZOFL.rglob("*.py")}
    assert {p: a for p, a in bad.items() if a} == {}
    names, engine_names = set(key_by_name()), {k.name for k in EngineSettings.keys()}
    items = {str(p.relative_to(ZOFL)): _reads(p, ITEM) for p in ZOFL.rglob("*.py") if p.name != "settings.py"}
    assert {p: sorted(a - names) for p, a in items.items() if a - names} == {}
    outside = {p: sorted(a - engine_names) for p, a in items.items()
               if not p.startswith("methods/") and a - engine_names}
    assert outside == {}


def test_the_read_checks_see_what_they_look_for():
    text = 'x = cfg.num_clients + self.cfg.seed; y = cfg["eta"]; z = run.cfg.get("beta"); w = self.cfg.typo_key'
    assert {m.group(1) for m in READ.finditer(text)} == {"num_clients", "seed", "get", "typo_key"}
    assert {m.group(1) for m in ITEM.finditer(text)} == {"eta", "beta"}


def test_a_method_reads_its_own_keys_only_through_its_typed_params():
    """In zofl/methods/, ``cfg.<attr>`` reads only the engine groups' keys; a method's own keys are read as
    ``hp.<field>`` (its Params), so READ_BY (which comes from Params) lists every method that reads a key."""
    engine = {k.field for g in ENGINE_GROUPS for k in g.keys()}
    own = {str(p.name): sorted(_reads(p) - engine) for p in (ZOFL / "methods").glob("*.py")}
    assert {p: a for p, a in own.items() if a} == {}
    declared = {k.field for e in METHODS.values() for k in e.server.Params.keys()}
    hp = re.compile(r"\bhp\.([a-z_][a-z0-9_]*)")
    used = {m.group(1) for p in (ZOFL / "methods").glob("*.py") for m in hp.finditer(p.read_text())}
    assert used - declared == set()


def test_groups_are_typed_frozen_views_of_the_flat_run_config():
    cfg = parse_config({"num-clients": 4, "beta": 0.5, "seed": 3, "x-min": 0.01})
    run, clients, task = Run.of(cfg), Clients.of(cfg), TaskSettings.of(cfg)
    assert (run.seed, clients.beta, task.x_min) == (3, 0.5, 0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.seed = 4
    zohfl = METHODS["zohfl"].server.Params.of(cfg)
    assert zohfl.lambda_ == cfg["lambda"] and zohfl.eta == cfg["eta"]  # 'lambda' is a keyword: field lambda_
    with pytest.raises(AttributeError):  # a method's own key is no attribute of the run-config: its Params' field
        cfg.eta
    # and a read-only mapping of every key by its flat name, a method's own too
    assert list(cfg) == list(cfg.keys()) and len(cfg) == len(list(cfg)) and "eta" in cfg and cfg["beta"] == 0.5
    assert dict(cfg) == dict(cfg.items()) and cfg == dict(cfg) and list(cfg.values()) == [cfg[k] for k in cfg]
    assert (cfg == 3) is False and cfg != "not a mapping"  # compared with a non-mapping: unequal, no error


def test_every_key_belongs_to_exactly_one_group_and_keeps_its_flat_name():
    all_keys = keys()
    assert len({k.name for k in all_keys}) == len(all_keys)
    assert all(k.group and k.field for k in all_keys)
    assert key_by_name()["lambda"].field == "lambda_" and key_by_name()["num-clients"].group == "Data"
    with pytest.raises(ConfigError, match="'x-min' must be a number >= 0"):
        parse_config({"x-min": -1.0})


def test_every_committed_grid_still_reads_as_valid_run_configs():
    """The flat keys are kept exactly: every cell of every grid in experiments/ parses (keys known, values
    allowed); finished-cell matching compares the keys READ_BY names (tests/test_compare.py)."""
    from zofl.compare import expand_grid, read_grid

    grids = sorted((ZOFL.parent / "experiments").glob("*.toml"))
    assert len(grids) > 40
    cells = 0
    for grid in grids:
        for cell in expand_grid(read_grid(grid)):
            parse_config(cell)
            cells += 1
    assert cells > 1000


def test_a_group_s_keys_read_as_its_bases_in_the_order_listed_then_its_own():
    """A group made of others (class C(A, B)) lists A's keys, then B's, then its own: the order of the class
    statement, not dataclasses' (which puts B's first)."""
    from zofl.settings import Settings, key

    @dataclass(frozen=True)
    class A(Settings):
        a_one: int = key(1, "an integer", "A's first", "ours")
        a_two: int = key(2, "an integer", "A's second", "ours")

    @dataclass(frozen=True)
    class B(Settings):
        b_one: int = key(3, "an integer", "B's", "ours")

    @dataclass(frozen=True)
    class C(A, B):
        c_one: int = key(4, "an integer", "C's own", "ours")

    assert [f.name for f in dataclasses.fields(C)] == ["b_one", "a_one", "a_two", "c_one"]
    assert C.names() == ("a-one", "a-two", "b-one", "c-one")
    assert [(k.group.rsplit(".", 1)[1], k.default) for k in C.keys()] == [("A", 1), ("A", 2), ("B", 3), ("C", 4)]


def test_a_key_keeps_its_default_and_the_check_given_or_accepts_every_value():
    """key(): the field's default is the one given, its check the one given (choice: one of the options), and a key
    given no check accepts any value."""
    from zofl.settings import Settings, choice, key

    @dataclass(frozen=True)
    class G(Settings):
        mode: str = key("fast", "fast or slow", "a choice", "ours", choice("fast", "slow"))
        free: str = key("anything", "any text", "no check", "ours")

    mode, free = G.keys()
    assert (G().mode, G().free, mode.default, free.default) == ("fast", "anything", "fast", "anything")
    assert [mode.check(v) for v in ("fast", "slow", "medium", "")] == [True, True, False, False]
    assert all(free.check(v) is True for v in ("", "x", 0, None))
