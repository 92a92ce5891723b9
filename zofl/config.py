"""The run-config: validation, the key list, and the flat ``Config`` every engine reads.

Every key is declared once, with its type, allowed values, default and source, as a field of a
typed settings group (``zofl.settings``: the groups every run has; a method's own parameters in its
module, its ``Method.Params``). ``keys()`` lists them all; ``parse_config`` checks a whole run-config
before any work starts and raises ``ConfigError`` naming the key and what is allowed. A test keeps
pyproject.toml's ``[tool.flwr.app.config]`` and this list in step, another docs/keys.md.
"""
from __future__ import annotations

import functools
import tomllib
from typing import Any, Iterable, Mapping

from .launch import toml_value
from .methods import METHODS, check_method_config, keys
from .settings import (  # noqa: F401  (re-exported: the names the rest of zofl and its users import from here)
    DATASETS,
    ENGINE_GROUPS,
    ENGINES,
    INT64_MAX,
    MAX_ROUNDS,
    MAX_STR,
    MIN_AVAILABILITY,
    Config,
    ConfigError,
    Key,
    Settings,
)


def key_by_name() -> dict[str, Key]:
    return _by_name(keys())


@functools.lru_cache(maxsize=8)
def _by_name(all_keys: tuple[Key, ...]) -> dict[str, Key]:
    return {k.name: k for k in all_keys}


def __getattr__(name: str) -> Any:
    """``KEYS`` and ``KEY_BY_NAME``, computed from the registry when first read (module attributes)."""
    if name == "KEYS":
        return keys()
    if name == "KEY_BY_NAME":
        return key_by_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def defaults() -> dict[str, Any]:
    return {k.name: k.default for k in keys()}


APP_CONFIG_HEADER = "[tool.flwr.app.config]"


def app_config_table() -> str:
    """pyproject.toml's ``[tool.flwr.app.config]``: every key and its default (Flower refuses a run-config key its
    App does not declare), in ``keys()`` order; ``zofl keys --write`` puts it in the project's pyproject.toml."""
    return "\n".join([APP_CONFIG_HEADER, *(f"{k.name} = {toml_value(k.default)}" for k in keys())]) + "\n"


def with_app_config(pyproject: str) -> str:
    """``pyproject`` (a pyproject.toml's text) with its ``[tool.flwr.app.config]`` table (up to the next blank line
    or table) replaced by ``app_config_table()``."""
    lines = pyproject.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.strip() == APP_CONFIG_HEADER)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip() or lines[i].startswith("[")),
               len(lines))
    return "".join(lines[:start]) + app_config_table() + "".join(lines[end:])


def _show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error stays one readable line whatever was given."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _coerce(key: Key, value: Any) -> Any:
    """``value`` as the key's type, or a ConfigError. Integers must fit Flower's sint64 (and floats'
    range), strings must be what Flower's ``--run-config`` can carry (no '"' or control characters)."""
    if isinstance(value, int) and not isinstance(value, bool) and key.type in (int, float) \
            and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed} and fit a signed 64-bit integer "
                          f"(Flower's run-config), got {_show(value)}")
    if key.type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if key.type is int and isinstance(value, float) and value.is_integer() and abs(value) <= INT64_MAX:
        return int(value)
    if not isinstance(value, key.type) or (key.type is not bool and isinstance(value, bool)):
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed}, got {_show(value)} "
                          f"({type(value).__name__})")
    if isinstance(value, str):
        _check_text(key, value)
    return value


def _check_text(key: Key, value: str) -> None:
    """Flower passes the run-config to its processes as one TOML line (``flwr run --run-config``), split
    by a pattern that ends a string at the first '"': a '"' or a control character (a newline, NUL) cannot
    get through, and a path with one could not be opened anyway."""
    bad = sorted({c for c in value if c == '"' or ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed}, without '\"' or control "
                          f"characters, got {_show(value)} (holds {', '.join(repr(c) for c in bad)})")
    if len(value) > MAX_STR:
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed}, at most {MAX_STR} characters, "
                          f"got {len(value)}")


def _cross_checks(cfg: Config) -> None:
    """Rules that involve several keys."""
    if cfg.speed_profile in ("uniform", "slow") and cfg.speed_param > 1:
        raise ConfigError(f"run-config key 'speed-param' must be in (0, 1] with speed-profile = "
                          f"{cfg.speed_profile!r}, got {cfg.speed_param}")
    for key, ids in (("slow-clients", cfg.slow_clients), ("hostile-clients", cfg.hostile_clients)):
        bad = [int(t) for t in ids.split(",") if t and int(t) >= cfg.num_clients]
        if bad:
            raise ConfigError(f"run-config key {key!r} names clients {bad}, but num-clients={cfg.num_clients} "
                              f"(ids 0..{cfg.num_clients - 1})")
    bad = [int(t.split(":")[0]) for t in cfg.leave.split(",") if t.strip() and int(t.split(":")[0]) >= cfg.num_clients]
    if bad:
        raise ConfigError(f"run-config key 'leave' names clients {bad}, but num-clients={cfg.num_clients} "
                          f"(ids 0..{cfg.num_clients - 1})")
    if cfg.hostile_clients and cfg.attack == "none":
        raise ConfigError("run-config key 'hostile-clients' is set but attack = 'none': choose large, sign-flip or "
                          "scale (or leave hostile-clients empty)")
    total = cfg.crash_prob + cfg.hang_prob + cfg.corrupt_prob
    if total > 1:
        raise ConfigError(f"run-config keys 'crash-prob' + 'hang-prob' + 'corrupt-prob' must be at most 1, got {total}")
    if cfg.hang_prob > 0 and not 0 < cfg.round_deadline_s < cfg.hang_s:
        raise ConfigError(f"run-config key 'hang-prob' > 0 needs 0 < round-deadline-s < hang-s (a hang must miss a "
                          f"deadline), got round-deadline-s={cfg.round_deadline_s}, hang-s={cfg.hang_s}")
    if cfg.real_delays != "off" and cfg.engine == "async" and cfg.clock == "simulated":
        raise ConfigError(f"run-config key 'real-delays' = {cfg.real_delays!r} needs a real clock: clock = 'wall' "
                          f"(on the simulated clock the delays are computed, not lived)")
    if cfg.resume and not cfg.run_name:
        raise ConfigError("run-config key 'resume' = true needs 'run-name': the run to continue")
    if cfg.engine == "async" and cfg.min_replies > cfg.num_clients:
        raise ConfigError(f"run-config key 'min-replies' = {cfg.min_replies} is more than a window's "
                          f"num-clients = {cfg.num_clients} task results: every window would fail")


def config_warnings(cfg: Config) -> list[str]:
    """Settings that run but mean something a user may not intend, said before round 1 (the ServerApp's
    log, and ``zofl run`` on stderr)."""
    out = METHODS[cfg.strategy].server.config_warnings(cfg)
    if cfg.dataset == "cifar10" and not cfg.standardize:
        out.append("run-config key 'standardize' = false with dataset = 'cifar10': a linear model on raw [0, 1] "
                   "pixels with the default steps diverges (the pre-trained x_0 with x0-lr = 0.1 ended at 15% test "
                   "accuracy, docs/results/README.md); set standardize = true and scale the steps to the data (the "
                   "CIFAR-10 tables use x0-lr = 0.001); the default stays false so that recorded runs keep their "
                   "meaning")
    if cfg.engine == "async" and cfg.clock == "wall" and cfg.real_delays == "off" and (
            cfg.comm_s > 0 or cfg.straggler_factor > 1):
        out.append("run-config keys 'comm-s' and 'straggler-factor' act on the simulated clock only: with clock = "
                   "'wall' they change nothing unless real-delays = 'sleep' or 'compute'")
    if cfg.aggregation != "mean":
        key, per_step = METHODS[cfg.strategy].server.updates_per_step(cfg)
        if per_step < 3:
            out.append(f"run-config key 'aggregation' = {cfg.aggregation!r} combines {per_step} client update(s) per "
                       f"server step ({key}); a robust rule over fewer than 3 is their mean and outvotes nobody: "
                       f"raise {key} so that at least 2f + 1 updates meet (f hostile clients)")
    return out


def clients_per_node(cfg: Config) -> int:
    """k, the clients each simulated SuperNode serves (run-config clients-per-node; ``zofl.core.shares``), on every
    engine and strategy."""
    from .core.shares import clients_per_node as k

    return k(cfg.num_clients, cfg.clients_per_node)


def parse_config(run_config: Mapping[str, Any]) -> Config:
    """Validate ``run_config`` (missing keys take their defaults); raise ConfigError on the first bad key."""
    by_name = key_by_name()
    unknown = sorted(set(run_config) - set(by_name))
    if unknown:
        import difflib

        hints = [f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
                 for k in unknown for close in [difflib.get_close_matches(k, by_name, n=1)]]
        raise ConfigError(f"unknown run-config key(s) {', '.join(hints)}; every key is listed by `zofl keys` "
                          f"(docs/keys.md) and in zofl/settings.py")
    values = defaults()
    for name, value in run_config.items():
        key = by_name[name]
        value = _coerce(key, value)
        if not key.check(value):
            raise ConfigError(f"run-config key {name!r} must be {key.allowed}, got {_show(value)}")
        values[name] = value
    cfg = Config.of_values(values)
    _cross_checks(cfg)
    check_method_config(cfg)
    return cfg


def parse_set(items: Iterable[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items, as ``zofl run``, ``zofl compare`` and the experiment scripts read them: VALUE is
    one TOML value (strings in double quotes), or else a bare word, taken as a string (``dataset=mnist``; the
    run-config check refuses what its key cannot be). An item without '=' or a key, and a value that reads as
    more than one TOML line ("1\nseed = 3": it would set keys nobody named), are refused: a ConfigError naming
    the item (a value nested too deep: zofl.safeio.FileRefused, one too)."""
    from .safeio import load_toml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (strings in double quotes, e.g. dataset=\"mnist\")")
        try:
            doc = load_toml(f"v = {value}", f"--set {key.strip()}")
        except tomllib.TOMLDecodeError:
            doc = {"v": value}  # a bare word: a string
        if set(doc) != {"v"}:
            raise ConfigError(f"--set {item!r}: expected one value after '=', got more than one TOML line")
        out[key.strip()] = doc["v"]
    return out
