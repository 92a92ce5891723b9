"""The ``zofl`` command: the things users do, each one short.

    zofl run [--strategy S] [--rounds R] [--clients M] [--set KEY=VALUE ...]
    zofl compare GRID.toml --out DIR [...]          (python -m zofl.compare)
    zofl plot RUN_DIR [RUN_DIR ...] [--out PNG]
    zofl keys                                       (every run-config key, docs/keys.md)
    zofl data get NAME [--data-dir D] [--from PATH]
    zofl deploy ...                                 (python -m zofl.deploy)

``zofl run`` checks the run-config here before anything starts (a bad key: one line naming it,
exit code 2), runs the Flower simulation on a private SuperLink of its own (no runtime dependency
installation, no environment variables to set, one SuperNode per client), shows progress per
round from the run's own records, prints the summary last, stops every process it started and
exits non-zero when the run failed (``flwr run`` itself exits 0 for a failed run: Flower's, not
ours). Flower's full output goes to ``<results>/flwr.log``. ``flwr run .`` keeps working; see
the README.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
MAX_RAY_CPUS = 1024  # --ray-cpus: a bound on Ray's CPU count (each concurrent ClientApp is a process)
CLI_LOCK = ".cli.lock"  # held by a zofl run for its run folder (``_hold_run_name``)


# -- zofl run ------------------------------------------------------------------------------------
def check_locally(run_config: dict[str, Any]):
    """The ServerApp's own start-up checks (config, task, data, the method's own, the results folder
    and what a resume would continue), here, before anything starts."""
    from .config import config_warnings
    from .server_app import make_run
    from .tasks.data import release_data

    cfg, method, writer = make_run(run_config)
    writer.close()
    records = method.communication_rounds()  # records rounds.jsonl will hold
    del method
    release_data()  # the server and the clients load what they need: this process holds nothing for the run
    for warning in config_warnings(cfg):
        print(f"zofl run: warning: {warning}", file=sys.stderr)
    return cfg, writer.dir.name, writer.dir, records


def concurrency_warning(cfg, ray_cpus: int | None, cpus_per_client: int, cores: int) -> str | None:
    """Where real sleeps (``step-time-s`` > 0) meet fewer ClientApps at once than clients: Ray runs at most
    ray-cpus / cpus-per-client, Flower's simulation engine at most min(32, cores + 4) (its worker threads),
    so clients queue for each other and real time exceeds what every client as its own device would take
    (docs/results/afbo_wallclock: AFBO 2.2x with 6 of 10 at once, within 4% per step with 10)."""
    if cfg.step_time_s <= 0:
        return None
    at_once = min((ray_cpus or cores) // max(1, cpus_per_client), min(32, cores + 4))
    if at_once >= cfg.num_clients:
        return None
    return (f"step-time-s = {cfg.step_time_s:g}: clients sleep for real, but at most {at_once} of the "
            f"{cfg.num_clients} ClientApps run at once here (Ray: --ray-cpus {ray_cpus or cores} / "
            f"--cpus-per-client {cpus_per_client}; Flower's simulation engine: min(32, {cores} cores + 4) threads), so "
            f"clients wait for each other and the run's real time is longer than its simulated clock says "
            f"(docs/results/afbo_wallclock)")


def progress_unit(cfg, records: int) -> str:
    """The unit of the records the progress counts: the summary's (``zofl.core.run.progress_unit``), the one
    in its brackets where the records are not num-rounds (FedNest's and FedRZO_bl's communication rounds;
    no asynchronous method has records other than its num-rounds updates today)."""
    if records == cfg.num_rounds:
        return "updates" if cfg.engine == "async" else "rounds"
    return "server steps" if cfg.engine == "async" else "communication rounds"


class _Progress:
    """Follows <results>/rounds.jsonl as the ServerApp writes it: records, accuracy, loss, ETA. On a terminal a
    tqdm bar; otherwise (a file, a pipe) a plain line every tenth of the run, no carriage returns."""

    def __init__(self, path: Path, total: int, quiet: bool, unit: str = "rounds", tty: bool | None = None):
        from tqdm import tqdm

        self.path, self.seen, self.t0, self.total, self.unit = path, 0, time.monotonic(), total, unit
        self.offset, self.file = 0, (0, 0)  # bytes of rounds.jsonl read (whole lines), and which file (dev, inode)
        self.lines = not quiet and not (sys.stdout.isatty() if tty is None else tty)
        self.done, self.every = 0, max(1, total // 10)
        self.t_first: float | None = None  # when the first record after round 0 was read
        self.done_first = 0  # the records done at that reading (1, or a resumed run's earlier ones)
        progress = self

        class Bar(tqdm):  # tqdm's bar, its time left from ``rate`` below
            @property
            def format_dict(self):
                return {**super().format_dict, "rate": progress.rate()}

        self.bar = Bar(total=total, unit="record", disable=quiet or self.lines, file=sys.stdout, dynamic_ncols=True,
                       bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} " + unit + " [{elapsed}<{remaining}]{postfix}")
        self.last: dict[str, Any] = {}

    def rate(self, now: float | None = None) -> float:
        """Records per second over the records after the first reading, 0 (time left shown as '?') before
        there are more: the first also pays for Ray's start and the first imports (a run of 5 rounds that
        ended a second later showed 1/5 at 00:35<02:20 when tqdm counted it), and a resume's first reading
        holds the records of the run it continues."""
        if self.t_first is None or self.done <= self.done_first:
            return 0.0
        elapsed = (time.monotonic() if now is None else now) - self.t_first
        return (self.done - self.done_first) / elapsed if elapsed > 0 else 0.0

    def poll(self) -> None:
        """Read the records written since the last poll: from where it stopped (the end of its last whole
        line), so a long run's poll costs its new records, not the whole file again. A resume replaces the
        file (the records up to its checkpoint, then the rounds run again): a new file, or a shorter one, is
        read from its start; progress is the highest round seen, so a round read twice counts once."""
        from .core.record import evaluated
        from .safeio import RECORD_CAP, FileRefused, load_json, open_regular

        try:
            fd = open_regular(self.path, "run's rounds.jsonl")
        except (OSError, FileRefused):
            return  # not written yet (or not a file: the run's own checks say so)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino) != self.file or st.st_size < self.offset:
                self.file, self.offset, self.seen = (st.st_dev, st.st_ino), 0, 0
            f.seek(self.offset)
            chunk = f.read(RECORD_CAP)
        whole = chunk[:chunk.rfind(b"\n") + 1]  # a record being written: read it next time
        new = []
        for line in whole.splitlines(keepends=True):
            if line.strip():
                try:
                    new.append(load_json(line.decode("utf-8"), f"{self.path}, line {self.seen + 1}"))
                except ValueError:  # not JSON (yet), or nested too deep (zofl.safeio.FileRefused)
                    break
            self.seen += 1
            self.offset += len(line)
        for rec in new:
            if evaluated(rec):  # the metrics shown: the newest the server evaluated (eval-every)
                self.last = rec
            k = rec.get("round", 0)
            if not isinstance(k, int) or k <= self.done:
                continue
            before, self.done = self.done, min(k, self.total)
            if self.t_first is None:
                self.t_first, self.done_first = time.monotonic(), self.done
            self.bar.update(self.done - before)
            if self.lines and (self.done // self.every > before // self.every or self.done == self.total):
                print(f"zofl run: {self.done}/{self.total} {self.unit}, {self._metrics()} "
                      f"[{time.monotonic() - self.t0:.0f} s]", flush=True)
        if new:
            self.bar.set_postfix_str(self._metrics())

    def _metrics(self) -> str:
        acc, loss = self.last.get("test_acc"), self.last.get("test_loss")
        return (f"round {self.last.get('round')}: test acc {'n/a' if acc is None else f'{acc:.4f}'}, loss "
                f"{'n/a' if loss is None else f'{loss:.4f}'}")

    def close(self) -> None:
        self.poll()
        self.bar.close()


def user_task_path(run_config: dict[str, Any], cwd: str | None = None) -> list[str]:
    """A task of the user's, named from the folder they run ``zofl run`` in, is found by the check here and by
    every process of the run (the SuperLink, Ray's workers: other folders): a 'file.py:attr' task gets an
    absolute path; the entries of PYTHONPATH are made absolute; the current folder is added when the task's
    module lies there (as ``python -m`` would). Returns the folders to put first on sys.path and PYTHONPATH."""
    cwd = cwd or os.getcwd()
    task = str(run_config.get("task", ""))
    module, _, attr = task.rpartition(":")
    if module.endswith(".py"):
        run_config["task"] = f"{Path(cwd, module).expanduser().resolve()}:{attr}"
    given = [os.path.abspath(os.path.join(cwd, p)) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    top = module.partition(".")[0]
    here = [cwd] if top and not module.endswith(".py") and \
        (Path(cwd, f"{top}.py").is_file() or Path(cwd, top, "__init__.py").is_file()) else []
    return list(dict.fromkeys([*here, *given]))


def _use_path(folders: list[str]) -> None:
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    if folders:
        os.environ["PYTHONPATH"] = os.pathsep.join(folders)


def _run_config(args) -> dict[str, Any]:
    """--set KEY=VALUE ... (zofl.config.parse_set) with the shorthands; a shorthand and --set of the same key must
    agree."""
    from .config import parse_set

    run_config = parse_set(args.set)
    out = getattr(args, "out", None)
    for flag, key, value in (("--strategy", "strategy", args.strategy), ("--rounds", "num-rounds", args.rounds),
                             ("--clients", "num-clients", args.clients),
                             ("--out", "output-dir", None if out is None else str(Path(out).expanduser().resolve()))):
        if value is None:
            continue
        if key in run_config and run_config[key] != value:
            raise ValueError(f"{flag} {value} and --set {key}={run_config[key]!r} disagree; give one of them")
        run_config[key] = value
    return with_method_defaults(run_config)


def with_method_defaults(run_config: dict[str, Any]) -> dict[str, Any]:
    """The run-config with the engine and task its method runs on by default, where the user named neither
    (``zofl run --strategy afbo`` runs AFBO on the async engine and hyper-cleaning, instead of failing on
    keys the user did not know it needed); an unknown strategy is left to the run-config's check."""
    from .core.method import ASYNC, MODEL
    from .methods import METHODS

    name = run_config.get("strategy", "zohfl")
    entry = METHODS.get(name) if isinstance(name, str) else None
    if entry is None:
        return run_config
    out = dict(run_config)
    if "engine" not in out and entry.server.kind == ASYNC:
        out["engine"] = "async"
    if "task" not in out and entry.server.needs != MODEL:
        out["task"] = entry.server.default_task
    return out


def methods_help() -> str:
    """The methods, what each runs on and needs, for ``zofl run --help`` (from the registry)."""
    from .core.method import ASYNC, MODEL
    from .methods import METHODS

    rows = [f"  {name:<12} {'async' if e.server.kind == ASYNC else 'sync, legacy':<13} "
            f"{e.server.default_task if e.server.needs != MODEL else 'softmax (any model task)':<25} {e.server.title}"
            for name, e in METHODS.items()]
    return ("methods (--strategy NAME): name, engines, the task it runs unless --set task names another of its "
            "kind, what it is\n" + "\n".join(rows))


def _hold_run_name(out: Path) -> int:
    """Hold ``out/.cli.lock`` for this ``zofl run`` (``zofl.results.lock_folder``): a second ``zofl run`` of
    the same run-name is refused at once, before its ServerApp could be refused after Ray's start-up.
    (The ServerApp takes the folder's own ``.lock`` when it starts; this one covers the time before.)"""
    from .results import FolderBusy, lock_folder

    try:
        return lock_folder(out, CLI_LOCK)
    except FolderBusy as exc:
        raise ValueError(f"run-config key 'run-name': {out} is in use by another zofl run (pid {exc.holder}); wait "
                         f"for it to end, stop it, or choose another run-name") from None


def cmd_run(args) -> int:
    from .config import ConfigError
    from .results import unlock_folder

    if args.ray_cpus is not None and args.cpus_per_client > args.ray_cpus:
        print(f"zofl run: error: --cpus-per-client {args.cpus_per_client} is more than --ray-cpus {args.ray_cpus}: "
              f"Ray could place no ClientApp", file=sys.stderr)
        return EXIT_CONFIG
    try:
        run_config = _run_config(args)
        _use_path(user_task_path(run_config))  # a task module of the user's: found here and in every process
        cfg, run_name, out, records = check_locally(run_config)
        lock = _hold_run_name(out)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"zofl run: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    cores = getattr(os, "process_cpu_count", os.cpu_count)() or 1  # what Python sizes thread pools by
    warning = concurrency_warning(cfg, args.ray_cpus, args.cpus_per_client, cores)
    if warning:
        print(f"zofl run: warning: {warning}", file=sys.stderr)
    try:
        run_config["run-name"] = run_name
        return _run(args, cfg, run_config, out, records)
    finally:
        unlock_folder(lock, remove=True)


def _run(args, cfg, run_config: dict[str, Any], out: Path, records: int) -> int:
    """``flwr run`` on a private SuperLink, progress, then this run's outcome (``zofl.results.run_outcome``)."""
    from .core.startup import LAUNCH_ENV, launch_stamp
    from .launch import flwr_run_command, local_superlink
    from .results import file_version, run_outcome

    print(f"zofl run: {cfg.strategy} on {cfg.dataset}, {cfg.num_clients} clients, engine {cfg.engine}; "
          f"results in {out}", flush=True)
    from .config import clients_per_node
    from .core.shares import num_nodes

    k = clients_per_node(cfg)
    nodes = num_nodes(cfg.num_clients, k)
    served = f" on {nodes} SuperNodes ({k} clients each, clients-per-node)" if k > 1 else ""
    print(f"zofl run: starting a private SuperLink and Flower's simulation (Ray) with {cfg.num_clients} virtual "
          f"clients{served}; the first round follows Ray's start (30-60 s)", flush=True)
    before = {name: file_version(out / name) for name in ("config.json", "summary.json")}
    log_lines: list[str] = []
    progress = _Progress(out / "rounds.jsonl", records, args.quiet, unit=progress_unit(cfg, records))
    try:
        with local_superlink(extra_env={LAUNCH_ENV: launch_stamp(out)}) as link:  # the summary's runtime_s
            federation = f"num-supernodes={nodes} client-resources-num-cpus={args.cpus_per_client}"
            if args.ray_cpus:  # Ray's own count of CPUs (init-args-num-cpus): how many ClientApps run at once
                federation += f" init-args-num-cpus={args.ray_cpus}"
            proc = link.popen(flwr_run_command("zofl", run_config, federation_config=federation),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            reader = threading.Thread(target=lambda: log_lines.extend(proc.stdout), daemon=True)
            reader.start()
            try:
                while proc.poll() is None:
                    progress.poll()
                    time.sleep(0.5)
            except KeyboardInterrupt:  # Ctrl-C: stop the run in the SuperLink first (`flwr stop`), then all of it
                progress.close()
                stopped = link.stop_run(_run_id(log_lines))
                print(f"\nzofl run: interrupted; {'the run was stopped (flwr stop), ' if stopped else ''}the "
                      f"SuperLink and the run's processes are stopped; resume with --set resume=true", file=sys.stderr)
                raise
            reader.join(5)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        progress.close()
        summary, accepted = run_outcome(out, before)
        log_path = _save_log(out if accepted else None, log_lines)
    text = [_strip_ansi(line.rstrip("\n")) for line in log_lines]
    if summary is not None:
        print("\n".join(_summary_block(text, out) or [f"done: {out}"]))
        if summary.get("failure"):  # the failure policy stopped it (what ran is recorded)
            print(f"zofl run: the run failed: {summary['failure']}", file=sys.stderr)
            return EXIT_FAILED
        return 0
    print(f"zofl run: the run failed{'' if accepted else ' before its ServerApp accepted ' + str(out)}; "
          f"Flower's output is in {log_path}", file=sys.stderr)
    for line in _error_lines(text):
        print(f"  {line}", file=sys.stderr)
    return EXIT_FAILED


def _run_id(lines: list[str]) -> int | None:
    """The run id ``flwr run`` printed ("Successfully started run 123..."), if it did."""
    import re

    for line in lines:
        m = re.search(r"started run (\d+)", line)
        if m:
            return int(m.group(1))
    return None


def _strip_ansi(s: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", s)


def _save_log(out: Path | None, lines: list[str]) -> Path:
    """Flower's output of this run: ``out/flwr.log`` when this run's ServerApp accepted ``out`` (else
    the folder, and its flwr.log, belong to an earlier or another run), or a temporary file."""
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "flwr.log").write_text("".join(lines))
            return out / "flwr.log"
        except OSError:
            pass
    with tempfile.NamedTemporaryFile("w", prefix="zofl-run-", suffix=".log", delete=False) as f:
        f.write("".join(lines))
    return Path(f.name)


def _summary_block(text: list[str], out: Path) -> list[str]:
    """The ServerApp's summary: its title line, the indented lines after it, up to "  results: <dir>"."""
    for i, line in enumerate(text):
        if line.strip() == f"results: {out}":
            j = i
            while j > 0 and text[j].startswith("  "):
                j -= 1
            return text[j:i + 1]
    return []


def _error_lines(text: list[str]) -> list[str]:
    keys = ("Error", "error:", "Exception", "Traceback")
    hits = [line.strip() for line in text if any(k in line for k in keys) and "Traceback" not in line]
    return (hits[-3:] if hits else [line for line in text if line.strip()][-10:])


# -- zofl plot -------------------------------------------------------------------------------------
def cmd_keys(args) -> int:
    """Every run-config key (docs/keys.md is this output); with --write DIR, DIR/docs/keys.md and DIR/pyproject.toml's
    [tool.flwr.app.config] table regenerated from the registry (after adding a method or a key)."""
    from .config import with_app_config
    from .methods import key_table

    if args.write is None:
        sys.stdout.write(key_table())
        return 0
    root = Path(args.write)
    (root / "docs" / "keys.md").write_text(key_table())
    pyproject = root / "pyproject.toml"
    pyproject.write_text(with_app_config(pyproject.read_text()))
    print(f"wrote {root / 'docs' / 'keys.md'} and the [tool.flwr.app.config] table of {pyproject}")
    return 0


def cmd_plot(args) -> int:
    """Test accuracy and loss per round of run folders, one PNG (``zofl.plot``); a folder or output
    that is not usable is refused in one line naming the file (exit 2) before anything is drawn."""
    from .plot import WriteError, check_out, plot_runs

    try:
        out = Path(args.out).expanduser()
        check_out(out)
        plot_runs([Path(d).expanduser() for d in args.runs], out)
    except WriteError as exc:  # checked input, but the image could not be written (disk full, no permission)
        print(f"zofl plot: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (ValueError, OSError) as exc:
        print(f"zofl plot: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"wrote {out}")
    return 0


# -- zofl data get ---------------------------------------------------------------------------------
def cmd_data(args) -> int:
    import pickle

    from .tasks import data

    root = Path(args.data_dir).expanduser()
    try:
        if args.source:
            path = data.convert_original(args.name, Path(args.source).expanduser(), root)
        else:
            path = data.download_npz(args.name, root)
        pooled = data.load_pooled(args.name, str(root), False)  # checks the file (cached per file version)
    except data.DataError as exc:  # a file that is not the dataset: the user's input (exit 2)
        print(f"zofl data: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:  # no network, no permission
        if args.source:
            print(f"zofl data: error: --from {args.source}: cannot be read ({exc})", file=sys.stderr)
            return EXIT_CONFIG
        print(f"zofl data: error: {args.name}: {exc}. Without a network, convert the original files: "
              f"zofl data get {args.name} --from PATH", file=sys.stderr)
        return EXIT_FAILED
    except (ValueError, KeyError, TypeError, IndexError, EOFError, pickle.UnpicklingError) as exc:
        if not args.source:
            raise
        # the original files given with --from are not what their name says (e.g. a garbled CIFAR-10 pickle)
        print(f"zofl data: error: --from {args.source}: not {args.name}'s original files "
              f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})", file=sys.stderr)
        return EXIT_CONFIG
    print(f"wrote {path}: {len(pooled.y)} examples, {pooled.x.shape[1]} features, {pooled.num_classes} classes")
    return 0


# -- the command ------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The parser; every parser in it reports a bad argument in one line (``prog: error: ...``, exit 2)."""
    import os

    def cpus(text: str) -> int:
        """--cpus-per-client: Ray cannot place a ClientApp that needs 0 CPUs or more than this machine has
        (Flower would fail, or wait forever, after its start-up); with --ray-cpus, more than that is checked
        in cmd_run."""
        try:
            n = int(text)
        except ValueError:
            n = 0
        if not 1 <= n <= (os.cpu_count() or 1):
            raise argparse.ArgumentTypeError(f"expected an integer in [1, {os.cpu_count() or 1}] (this machine's "
                                             f"CPUs), got {text!r}")
        return n

    def ray_cpus(text: str) -> int:
        """--ray-cpus: Ray's count of CPUs (Flower's init-args-num-cpus, an integer)."""
        try:
            n = int(text)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_RAY_CPUS:
            raise argparse.ArgumentTypeError(f"expected an integer in [1, {MAX_RAY_CPUS}], got {text!r}")
        return n

    def one_line(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        def error(message: str):
            parser.exit(EXIT_CONFIG, f"{parser.prog}: error: {' '.join(message.split())} (see {parser.prog} "
                                     f"--help)\n")
        parser.error = error
        return parser

    ap = argparse.ArgumentParser(prog="zofl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one simulation (Flower, Ray backend) on a private SuperLink",
                         epilog=methods_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--strategy", help="shorthand for --set strategy=...")
    run.add_argument("--rounds", type=int, help="shorthand for --set num-rounds=...")
    run.add_argument("--clients", type=int, help="shorthand for --set num-clients=... (a simulated SuperNode each up "
                     "to 100 clients, at most 100 SuperNodes beyond: clients-per-node)")
    run.add_argument("--out", metavar="DIR", help="results go to DIR/<run-name>/ (shorthand for --set output-dir=DIR, "
                                                  "made absolute; default ~/zofl-results)")
    run.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                     help="run-config keys (zofl keys, docs/keys.md), e.g. --set dataset=\"mnist\" alpha=0.1")
    run.add_argument("--cpus-per-client", type=cpus, default=1, help="Ray CPUs per ClientApp (default 1)")
    run.add_argument("--ray-cpus", type=ray_cpus, default=None,
                     help="CPUs Ray may hand out (default: this machine's). Ray runs at most ray-cpus / "
                          "cpus-per-client ClientApps at once, and Flower's simulation engine at most min(32, cores + "
                          "4) (its worker threads: 6 on 2 cores), whatever this says; for clock = \"wall\" with "
                          "step-time-s, every client is its own device only when both are >= num-clients "
                          "(docs/results/afbo_wallclock)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    keys_p = sub.add_parser("keys", help="every run-config key: default, allowed values, which methods read it "
                                         "(markdown)")
    keys_p.add_argument("--write", metavar="PROJECT_DIR", default=None,
                        help="write PROJECT_DIR/docs/keys.md and the [tool.flwr.app.config] table of its "
                             "pyproject.toml instead (after adding a method or a key)")
    sub.add_parser("compare", help="a grid of runs (python -m zofl.compare)", add_help=False)
    sub.add_parser("deploy", help="deployment helpers (python -m zofl.deploy)", add_help=False)
    plot = sub.add_parser("plot", help="test accuracy and loss of one or several runs, one PNG")
    plot.add_argument("runs", nargs="+", help="run folders (<output-dir>/<run-name>)")
    plot.add_argument("--out", default="zofl-plot.png",
                      help="the image to write, exactly this path: its suffix is its type (.png, .pdf, .svg, ...; "
                           "default zofl-plot.png)")
    data_p = sub.add_parser("data", help="datasets")
    data_sub = data_p.add_subparsers(dest="data_command", required=True)
    get = data_sub.add_parser("get", help="fetch a dataset (network) or convert its original files into DIR/NAME.npz")
    get.add_argument("name", choices=("mnist", "fashion_mnist", "cifar10", "covtype"))
    get.add_argument("--data-dir", default="~/.cache/zofl/data", help="where NAME.npz goes (run-config data-dir)")
    get.add_argument("--from", dest="source",
                     help="convert files you have instead of downloading: a folder with the IDX files (MNIST, "
                          "Fashion-MNIST; .gz or not), CIFAR-10's python pickles (cifar-10-batches-py), or a "
                          "Keras-style .npz")
    for parser in (ap, run, plot, data_p, get):
        one_line(parser)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "compare":
        from .compare import main as compare_main

        compare_main(argv[1:], prog="zofl compare")
        return 0
    if argv and argv[0] == "deploy":
        from .deploy import main as deploy_main

        return int(deploy_main(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    return {"run": cmd_run, "plot": cmd_plot, "data": cmd_data, "keys": cmd_keys}[args.command](args)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
