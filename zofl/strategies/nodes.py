"""Which SuperNode holds which partition (client id i), learned without sending any work.

Every node answers a ``query.partition`` message with the ``partition-id`` and ``num-partitions``
of its node config (``zofl.client_app``); the reply costs no loading of the run's dataset. A node whose node
config names data of its own (``zofl.tasks.local``) adds their size N_i and fingerprint (never their path), or
the reason they cannot be used: such a node is refused alone, named, and the run goes on with the others. After
this, each round contacts only the clients it samples.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from ..config import ConfigError
from ..core.protocol import (
    ARRAYS,
    CONFIG,
    DATA_ERROR,
    DATA_FINGERPRINT,
    MAX_DATA_ERROR,
    MAX_EXAMPLES,
    MAX_FINGERPRINT,
    METRICS,
    NO_DATA,
    NO_PARTITION,
    NUM_EXAMPLES,
    NUM_PARTITIONS,
    PARTITION_ID,
    QUERY_PARTITION,
    TRAIN,
)
from ..core.shares import num_nodes, share
from .deadline import poll_interval, wait_for_replies
from .wire import APP_QUERY

log = logging.getLogger("zofl")


def partition_query(node: int) -> Message:
    """zofl's ClientApp is asked its partition with a message of its own type (``query.partition``)."""
    return Message(RecordDict(), dst_node_id=node, message_type=QUERY_PARTITION)


def app_query(model: ArrayRecord) -> Callable[[int], Message]:
    """A user's ClientApp answers train and evaluate only: it is asked with a ``train`` message that asks only its
    client id (``zofl.client.train`` answers it without training); the message holds the model, as every train
    message does (the ClientApp may load it before it calls zofl.client.train)."""
    def query(node: int) -> Message:
        return Message(RecordDict({ARRAYS: model, CONFIG: ConfigRecord({APP_QUERY: "partition"})}),
                       dst_node_id=node, message_type=TRAIN)
    return query


@dataclass(frozen=True)
class Answer:
    """A node's answer to query.partition, checked: its claim, and for a node with data of its own their size and
    fingerprint, or why they cannot be used (``error``). A node serving a share of clients (server-data = none,
    clients-per-node) reports a size and a fingerprint per client of its share, in the share's order (tuples)."""

    pid: int
    parts: int
    num_examples: int | tuple[int, ...] | None = None
    fingerprint: str | tuple[str, ...] | None = None
    error: str | None = None

    def of_client(self, j: int) -> Answer:
        """The answer as the ``j``-th client of the node's share has it (its own size and fingerprint)."""
        if not isinstance(self.num_examples, tuple):
            return self
        return Answer(self.pid, self.parts, self.num_examples[j], self.fingerprint[j])


def read_answer(msg: Message) -> Answer:
    """``msg``'s answer; a malformed one (a node's bug or a hostile node) is an Answer with its ``error``."""
    try:
        rec = msg.content.metric_records[METRICS]
        pid, parts = int(rec[PARTITION_ID]), int(rec[NUM_PARTITIONS])
    except (KeyError, TypeError, ValueError, OverflowError):
        return Answer(NO_PARTITION, 0, error="its answer has no partition-id and num-partitions")
    own = msg.content.config_records.get(CONFIG)
    if own is None:
        return Answer(pid, parts)
    if DATA_ERROR in own:
        return Answer(pid, parts, error=str(own[DATA_ERROR])[:MAX_DATA_ERROR])
    n, fp = own.get(NUM_EXAMPLES), own.get(DATA_FINGERPRINT)
    if isinstance(n, list) or isinstance(fp, list):  # a share's clients, one of each per client
        if not (isinstance(n, list) and isinstance(fp, list) and 0 < len(n) == len(fp) <= MAX_SHARE):
            return Answer(pid, parts, error=f"it reports {NUM_EXAMPLES} and {DATA_FINGERPRINT} that are not two "
                                            f"lists of one length in [1, {MAX_SHARE}]")
        each = [_size_error(v) or _fingerprint_error(f) for v, f in zip(n, fp)]
        bad = next((e for e in each if e), None)
        return Answer(pid, parts, error=bad) if bad else Answer(pid, parts, tuple(n), tuple(fp))
    error = _size_error(n) or _fingerprint_error(fp)
    return Answer(pid, parts, error=error) if error else Answer(pid, parts, n, fp)


MAX_SHARE = 1_000_000  # the clients one node may report on (a share is at most num-clients)


def one_client(answer: Answer) -> Answer:
    """The answer of a node that claims one client: a report per client must then be of one client."""
    if isinstance(answer.num_examples, tuple):
        if len(answer.num_examples) != 1:
            return Answer(answer.pid, answer.parts, error=f"it claims one client and reports the data of "
                                                          f"{len(answer.num_examples)}")
        return answer.of_client(0)
    return answer


def _size_error(n) -> str | None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EXAMPLES:
        return f"it reports {NUM_EXAMPLES}={str(n)[:40]!r}, not an integer in [1, 2^40]"
    return None


def _fingerprint_error(fp) -> str | None:
    if not isinstance(fp, str) or not 0 < len(fp) <= MAX_FINGERPRINT:
        return f"it reports no {DATA_FINGERPRINT} of at most {MAX_FINGERPRINT} characters"
    return None


def smaller_federation(m: int, n: int, need: int | None = None) -> ConfigError:
    """The refusal of a whole federation of ``n`` < ``need`` SuperNodes (num-clients = m; ``need``: the SuperNodes
    the run's clients take, ceil(m / clients-per-node), m by default), with the one-line fix."""
    need = m if need is None else need
    nodes = "" if need == m else f" (on {need} SuperNodes, clients-per-node)"
    other = f"set num-clients={n}" if need == m else "set clients-per-node so that they are num-supernodes"
    return ConfigError(
        f"run-config num-clients={m}{nodes} but the federation has {n} SuperNodes: run "
        f"`flwr run . --stream --federation-config \"num-supernodes={need}\"` (or `zofl run`, which sizes "
        f"the federation itself), or {other}")


class Question:
    """The partition question, pushed once to each node, its replies pulled as they come.

    A node is never asked twice: on a loaded machine a deployed SuperNode's ClientApp can take longer to
    start than any fixed wait, and a second question would queue a second ClientApp behind the first while
    the first one's answer was thrown away (a 10 s question asked again until client-wait-s ran out, on CI at
    load 12 or more). ``replies``: node id -> its reply, of every node that has answered."""

    def __init__(self, grid: Grid, query: Callable[[int], Message] = partition_query):
        self.grid, self.query = grid, query
        self.asked: set[int] = set()
        self.waiting: dict[str, int] = {}  # message id -> the node it went to, unanswered
        self.replies: dict[int, Message] = {}
        self.taken: set[int] = set()  # the nodes whose reply ``fresh`` has given

    def ask(self, nodes: Iterable[int]) -> None:
        """Push the question to every node of ``nodes`` not asked yet."""
        new = [n for n in nodes if n not in self.asked]
        if new:
            self.asked |= set(new)
            self.waiting.update(zip(self.grid.push_messages([self.query(n) for n in new]), new))

    def pull(self, seconds: float = 0.0) -> None:
        """Take the replies that have come, after ``seconds`` (less where the grid can say one is ready)."""
        if seconds > 0:
            wait_for_replies(self.grid, self.waiting, seconds)
        if self.waiting:
            for msg in self.grid.pull_messages(list(self.waiting)):
                node = self.waiting.pop(msg.metadata.reply_to_message_id, None)
                if node is not None:
                    self.replies[node] = msg

    def fresh(self) -> list[Message]:
        """The replies not given before, in the order of their nodes' ids."""
        new = sorted(self.replies.keys() - self.taken)
        self.taken |= set(new)
        return [self.replies[n] for n in new]

    def whole_federation(self, nodes: list[int]) -> bool:
        """Whether ``nodes`` are a whole federation already: every one has answered num-partitions = len(nodes)
        (a simulation's SuperNodes are all there from the start, and say so; deployed SuperNodes started for this
        run say num-partitions = num-clients, so the server keeps waiting for the others)."""
        return all(n in self.replies and not self.replies[n].has_error()
                   and read_answer(self.replies[n]).parts == len(nodes) for n in nodes)


def wait_for_nodes(grid: Grid, m: int, wait_s: float, clients: int | None = None,
                   question: Question | None = None) -> list[int]:
    """The node ids once m have connected (or, after ``wait_s``, those that have: at least one). Nodes that
    say they are a whole, smaller federation are refused as soon as all of them have answered (``smaller_federation``);
    each node is asked once (``question``, whose replies the caller may read). ``clients``: the run's num-clients
    where its m nodes serve several each (clients-per-node; the messages name both)."""
    clients = m if clients is None else clients
    question = Question(grid) if question is None else question
    deadline = time.monotonic() + wait_s
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= m:
            return nodes
        if time.monotonic() > deadline:
            if nodes:  # a deployment with SuperNodes missing: learn_partitions reports the partitions nobody holds
                log.warning("run-config num-clients=%d (%d SuperNodes) but only %d SuperNodes connected after %.0fs "
                            "(client-wait-s)", clients, m, len(nodes), wait_s)
                return nodes
            raise ConfigError(
                f"run-config num-clients={clients} but no SuperNode connected within {wait_s:.0f}s (client-wait-s): "
                f"start the simulation with --federation-config 'num-supernodes={m}', or start the SuperNodes")
        question.ask(nodes)
        question.pull(POLL_S)
        if nodes and question.whole_federation(nodes):
            raise smaller_federation(clients, len(nodes), m)


POLL_S = 0.2  # between two looks at the connected nodes while waiting for them


@dataclass
class Federation:
    """Who holds which partition, as the server decided it (not as replies claim).

    nodes: {client id i: node id}, the first SuperNode (lowest node id) to claim each partition;
    refused: (node id, partition it claimed, node id holding it) of every later claimant, which
    never gets work, so no partition is aggregated twice, and (node id, its partition-id,
    ``NO_PARTITION``) of every node whose claim is no partition of this run; unheld: partitions nobody holds (each
    round that samples one counts it as a failure, "no SuperNode holds partition i")."""

    nodes: dict[int, int]
    refused: list[tuple[int, int, int]] = field(default_factory=list)
    unheld: list[int] = field(default_factory=list)
    asked: set[int] = field(default_factory=set)  # every node id asked its partition
    pending: dict[int, int] = field(default_factory=dict)  # refused node -> partition, until its holder is gone
    rejoined: list[tuple[int, int, int]] = field(default_factory=list)  # (node, partition, node it replaced)
    held: dict[int, int] = field(default_factory=dict)  # node id -> partition, of every node that ever held one
    sizes: dict[int, int] = field(default_factory=dict)  # partition -> N_i its node reported (data of its own)
    fingerprints: dict[int, str] = field(default_factory=dict)  # partition -> the fingerprint its node reported
    data_errors: dict[int, str] = field(default_factory=dict)  # node id -> why its own data cannot be used
    answers: dict[int, Answer] = field(default_factory=dict)  # node id -> its answer, while it is pending
    query: Callable[[int], Message] = partition_query  # how a node is asked its partition (``app_query``)
    question: Question | None = None  # the partition question, kept so that a late answer is taken (``refresh``)
    learned_s: float | None = None  # how long learning the map took, waiting for the nodes included (the summary's)
    first_answer_s: float | None = None  # of that, until the first node's answer (the runtime ready to run one)
    k: int = 1  # clients each simulated node serves (run-config clients-per-node, ``zofl.core.shares``)

    def claims(self, answer: Answer, m: int) -> list[int] | None:
        """The clients a node's answer claims: its partition-id of num-partitions = m (one client), or with k > 1
        the share of its partition-id of num-partitions = ceil(m / k) (``zofl.core.shares``); None when it names
        no partition of this run."""
        if answer.parts == m and 0 <= answer.pid < m:
            return [answer.pid]
        if self.k > 1 and answer.parts == num_nodes(m, self.k) and 0 <= answer.pid < answer.parts:
            return list(share(answer.pid, m, self.k))
        return None

    def refuse_changed(self, changed: Mapping[int, str]) -> None:
        """The nodes holding the partitions in ``changed`` ({partition: why}: their data are not the run's) lose
        them before round 1: refused, named with the reason, their partitions unheld."""
        for pid, reason in sorted(changed.items()):
            node = self.nodes.pop(pid)
            self.held.pop(node, None)
            self.sizes.pop(pid, None)
            self.fingerprints.pop(pid, None)
            self.refuse_data(node, Answer(pid, 0, error=reason))
        self.unheld = sorted(set(self.unheld) | set(changed))
        if changed and not self.nodes:
            pid = min(changed)
            raise ConfigError(f"no SuperNode holds a partition of this run: partition {pid}'s node is refused, "
                              f"{changed[pid]}" + (f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""))

    def refuse_data(self, node: int, answer: Answer) -> None:
        """``node`` gets no work: its own data cannot be used (``answer.error``, logged with its node id)."""
        self.refused.append((node, answer.pid, NO_DATA))
        self.data_errors[node] = answer.error
        log.warning("SuperNode %d (partition-id=%d) is refused, it gets no work: %s", node, answer.pid, answer.error)

    def __post_init__(self):
        self.held.update({n: p for p, n in self.nodes.items()})

    def hold(self, pid: int, node: int, answer: Answer | None = None) -> None:
        """``node`` holds partition ``pid`` from now on (the node that held it before stays in ``held``: its
        late replies are still its partition's), with the size and fingerprint of its own data, if any."""
        self.sizes.pop(pid, None)
        self.fingerprints.pop(pid, None)
        if answer is not None and answer.num_examples is not None:
            self.sizes[pid], self.fingerprints[pid] = answer.num_examples, answer.fingerprint
        self.nodes[pid] = node
        self.held[node] = pid

    def _hold_share(self, node: int, clients: list[int], answer: Answer) -> None:
        """``node`` serves ``clients`` (its share) from now on, unless one of them is held already: then it is
        refused, named, and gets no work (a share is never split between nodes)."""
        taken = [c for c in clients if c in self.nodes]
        if isinstance(answer.num_examples, tuple) and len(answer.num_examples) != len(clients):
            self.refuse_data(node, Answer(answer.pid, 0, error=(
                f"it reports the data of {len(answer.num_examples)} clients for its share of {len(clients)}")))
            return
        if taken:
            self.refused.append((node, answer.pid, self.nodes[taken[0]]))
            log.warning("SuperNode %d claims clients %d..%d, of which client %d is served by SuperNode %d: refused, "
                        "it gets no work", node, clients[0], clients[-1], taken[0], self.nodes[taken[0]])
            return
        for j, c in enumerate(clients):
            self.hold(c, node, answer.of_client(j))

    def partition_of(self, node: int) -> int:
        """The partition (client id) of a node that holds or held one, -1 for any other node."""
        return self.held.get(int(node), -1)

    def refresh(self, grid: Grid, m: int, timeout: float = 10.0) -> bool:
        """Between rounds: a SuperNode that connected since (a restarted one gets a new node id) is
        asked its partition; it takes over a partition nobody holds, or one whose holder has left the
        federation (Flower drops a node that misses its heartbeats, about a minute); otherwise it
        waits, refused, until that happens. Its answer is awaited up to ``timeout``; a later one (a
        ClientApp starting on a loaded machine) is taken at a later refresh, and the node is never asked
        twice. Returns whether the map changed. Cheap when nothing changed: one ``get_node_ids`` (and one pull
        while an answer is outstanding)."""
        online = set(grid.get_node_ids())
        if self.question is None:
            self.question = Question(grid, self.query)
            self.question.asked |= self.asked
        question = self.question
        question.grid = grid
        new = sorted(online - question.asked)
        question.ask(new)
        self.asked |= set(new)
        end = time.monotonic() + timeout
        question.pull()
        while set(new) & set(question.waiting.values()) and time.monotonic() < end:
            question.pull(min(poll_interval(grid), end - time.monotonic()))
        for msg in question.fresh():
            node = msg.metadata.src_node_id
            if msg.has_error():
                log.warning("SuperNode %d could not say its partition: %s", node, msg.error.reason)
                continue
            answer = read_answer(msg)
            claimed = self.claims(answer, m)
            if claimed is not None and answer.parts == m:
                answer = one_client(answer)
            if answer.error is not None:
                self.refuse_data(node, answer)
            elif claimed is None:
                log.warning("SuperNode %d has partition-id=%d, num-partitions=%d, but num-clients=%d: refused",
                            node, answer.pid, answer.parts, m)
                self.refused.append((node, answer.pid, NO_PARTITION))
            elif answer.parts != m:  # a share of clients: taken where none of them is held, never pending
                self._hold_share(node, claimed, answer)
            else:
                self.pending[node] = answer.pid
                self.answers[node] = answer
        changed = False
        for node, pid in sorted(self.pending.items()):
            holder = self.nodes.get(pid)
            if node not in online:
                del self.pending[node]
            elif holder is None or holder not in online:
                answer, was = self.answers.get(node), self.fingerprints.get(pid)
                if was is not None and (answer is None or answer.fingerprint != was):
                    # a node of data of its own takes a partition over only with the same data (else its N_i and
                    # its updates would not be the run's partition's): refused alone, named, the partition unheld
                    del self.pending[node]
                    self.refused = [r for r in self.refused if r[0] != node]
                    now = "no data of its own" if answer is None or answer.fingerprint is None \
                        else f"fingerprint {answer.fingerprint}"
                    self.refuse_data(node, Answer(pid, 0, error=(
                        f"it claims partition {pid}, whose data had fingerprint {was}, with {now}: a node rejoining "
                        f"mid-run must hold the same data")))
                    continue
                self.hold(pid, node, answer)
                del self.pending[node]
                self.refused = [r for r in self.refused if r[0] != node]  # refused while its holder was there
                self.rejoined.append((node, pid, holder if holder is not None else -1))
                log.warning("SuperNode %d now holds partition-id=%d (%s)", node, pid,
                            "nobody did" if holder is None else f"SuperNode {holder} has left")
                changed = True
            elif not any(r[0] == node for r in self.refused):
                self.refused.append((node, pid, holder))
                log.warning("SuperNode %d also claims partition-id=%d, held by SuperNode %d: refused while that one "
                            "is connected", node, pid, holder)
        self.unheld = sorted(set(range(m)) - set(self.nodes))
        return changed


def learn_partitions(grid: Grid, m: int, wait_s: float, k: int = 1) -> Federation:
    """Ask every SuperNode its partition until each of 0..m-1 is held or ``wait_s`` has passed.

    A node whose num-partitions or partition-id disagrees with num-clients (e.g. partition-id = 99 of
    10) is refused and logged (``Federation.refused``, held_by ``NO_PARTITION``), as is a second node
    claiming a held partition: neither gets work, and the others' run goes on; a
    partition nobody holds by the deadline is logged and reported, and the run goes on without it
    (the failure policy decides whether that is acceptable). No partition held at all: an error."""
    t0, t_wall = time.perf_counter(), time.time()
    deadline = time.monotonic() + wait_s
    question = Question(grid)
    wait_for_nodes(grid, num_nodes(m, k), wait_s, m, question)
    fed = Federation({}, k=k)
    end = max(deadline, time.monotonic() + 1.0)  # the answers of nodes that connected at the last moment
    while True:
        question.ask(sorted(grid.get_node_ids()))
        question.pull(poll_interval(grid))
        new = question.fresh()
        if new and fed.first_answer_s is None:  # a reply is made (created_at) on its node, this clock
            fed.first_answer_s = max(0.0, min(r.metadata.created_at for r in new) - t_wall)
        for msg in new:
            _claim(fed, msg, m)
        if len(fed.nodes) == m or time.monotonic() > end:
            break
    fed.asked, fed.question = set(question.asked), question  # a silent node's late answer: taken by ``refresh``
    fed.unheld = sorted(set(range(m)) - set(fed.nodes))
    if not fed.nodes:
        refused = [f"SuperNode {n}: partition-id={p}" for n, p, h in fed.refused if h == NO_PARTITION]
        if refused:  # they answered, and every answer was refused
            raise ConfigError(f"no SuperNode holds a partition of this run after {wait_s:.0f}s (client-wait-s): the "
                              f"{len(refused)} that answered are outside partition ids 0..{m - 1} or have "
                              f"num-partitions != num-clients = {m}: {', '.join(refused)}")
        if fed.data_errors:
            first = min(fed.data_errors)
            raise ConfigError(f"no SuperNode holds a partition of this run: the data of all {len(fed.data_errors)} "
                              f"that answered cannot be used; SuperNode {first}: {fed.data_errors[first]}")
        raise ConfigError(f"no SuperNode answered for any partition within {wait_s:.0f}s (client-wait-s)")
    if fed.unheld:
        log.warning("no SuperNode holds partition-id(s) %s after %.0fs (client-wait-s): the run goes on without "
                    "them; each round that samples one counts it as failed", fed.unheld, wait_s)
    fed.learned_s = time.perf_counter() - t0
    log.info("learned the partitions of %d SuperNodes in %.2fs (%d clients)", len(set(fed.nodes.values())),
             fed.learned_s, len(fed.nodes))
    return fed


def _claim(fed: Federation, msg: Message, m: int) -> None:
    node = msg.metadata.src_node_id
    if msg.has_error():
        raise ConfigError(f"SuperNode {node} could not say its partition: {msg.error.reason}")
    answer = read_answer(msg)
    pid, parts = answer.pid, answer.parts
    claimed = fed.claims(answer, m) if answer.error is None else None
    if claimed is not None and parts != m:  # a share (its partition-id names the share, not a client)
        fed._hold_share(node, claimed, answer)
        return
    answer = one_client(answer)
    if answer.error is not None:  # its own data cannot be used: refused alone, the others' run goes on
        fed.refuse_data(node, answer)
        return
    if claimed is None:
        # one misconfigured SuperNode (its ClientApp would refuse work anyway) must not stop the others'
        # run: refused alone, as a second claimant is; held_by -1 = no partition of this run
        fed.refused.append((node, pid, NO_PARTITION))
        log.warning("SuperNode %d has partition-id=%d, num-partitions=%d, but run-config num-clients=%d (partition "
                    "ids 0..%d): refused, it gets no work (fix its node config)", node, pid, parts, m, m - 1)
        return
    if pid in fed.nodes:
        fed.refused.append((node, pid, fed.nodes[pid]))
        fed.pending[node] = pid  # it may take the partition over if its holder leaves
        fed.answers[node] = answer
        log.warning("SuperNode %d also claims partition-id=%d, held by SuperNode %d: refused, it gets no work "
                    "(give every SuperNode its own partition-id)", node, pid, fed.nodes[pid])
        return
    fed.hold(pid, node, answer)


def learn_app_nodes(grid: Grid, min_nodes: int, wait_s: float, model: ArrayRecord) -> tuple[Federation, int]:
    """The federation of a user's App (``zofl.strategies.app``) and its number of clients m, once ``min_nodes``
    SuperNodes have connected (a ConfigError after ``wait_s`` with fewer). Every node is asked with ``app_query``
    (holding ``model``, x_0)
    (its answer: the partition-id and num-partitions of its node config, -1 and 0 when it has none, and its N_i and
    data fingerprint). When every node names a partition of one num-partitions N, no two the same, the client ids are
    the partition ids and m = N (the Ray simulation: a run then draws what ``zofl run`` draws for the same
    partitions); otherwise (deployed SuperNodes without them) the ids are 0..m-1 in the order of the node ids,
    m = the nodes that answered. A node whose answer cannot be used is refused alone, named."""
    t0, deadline = time.perf_counter(), time.monotonic() + wait_s
    while len(list(grid.get_node_ids())) < min_nodes:
        if time.monotonic() > deadline:
            raise ConfigError(f"min_available_nodes={min_nodes}, but {len(list(grid.get_node_ids()))} SuperNode(s) "
                              f"connected within {wait_s:.0f}s: start more SuperNodes (or num-supernodes in the "
                              f"simulation), or lower min_available_nodes")
        time.sleep(0.2)
    nodes = sorted(grid.get_node_ids())
    fed = Federation({}, query=app_query(model))
    fed.asked |= set(nodes)
    answers: dict[int, Answer] = {}
    for msg in grid.send_and_receive([fed.query(n) for n in nodes], timeout=max(1.0, deadline - time.monotonic())):
        node = msg.metadata.src_node_id
        answer = one_client(read_answer(msg)) if not msg.has_error() \
            else Answer(NO_PARTITION, 0, error=str(msg.error.reason)[:200])
        if answer.error is not None:
            fed.refuse_data(node, answer)
        else:
            answers[node] = answer
    if not answers:
        raise ConfigError(f"none of the {len(nodes)} SuperNode(s) gave a usable answer: is zofl.client.train their "
                          f"ClientApp's @app.train()?")
    parts = {a.parts for a in answers.values()}
    pids = [a.pid for a in answers.values()]
    (m,) = parts if len(parts) == 1 else (0,)
    if not (m > 0 and len(set(pids)) == len(pids) and all(0 <= p < m for p in pids)):
        m = len(answers)
        answers = {node: Answer(i, m, a.num_examples, a.fingerprint)
                   for i, (node, a) in enumerate(sorted(answers.items()))}
        log.info("the SuperNodes name no partitions of one federation: client ids 0..%d in the order of their node ids",
                 m - 1)
    for node, answer in sorted(answers.items()):
        fed.hold(answer.pid, node, answer)
    fed.unheld = sorted(set(range(m)) - set(fed.nodes))
    fed.learned_s = time.perf_counter() - t0
    return fed, m
