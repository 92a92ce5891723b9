"""Every seed stream, registered once: a random draw anywhere in zofl comes from
``np.random.default_rng(seed_sequence(seed, ..., STREAM))`` (``zofl.algorithms.smoothing``), and the
stream word keeps draws of different purposes apart. A value registered twice raises at import, so
two purposes can never share one stream again (0x73 once served both the clients' availability and the
hostile clients' attack: in a run with both, they drew the same numbers; availability moved to 0x75).

The stream is the last word of the sequence, except where a module says otherwise (ADBO: the second,
right after the seed). ``STREAMS`` maps each value to its purpose and user; docs/architecture.md links here.

A trailing zero word adds nothing: numpy's ``SeedSequence([s, 0])`` is ``SeedSequence([s])`` (the same
generator state), so PRETRAIN (0) draws what ``seed_sequence(seed)`` would, and a sub-stream word 0 after
a stream (``..., STREAM_BATCHES, 0``) draws what the stream alone does. Where both appear in one method
they serve different tasks (AFBO: the INNER tasks' batches and the OUTER tasks' upper batches), so no two
draws of one task coincide; a new sub-stream should start at 1 if the stream alone is used for the same task.
"""
from __future__ import annotations

STREAMS: dict[int, str] = {}


def stream(value: int, purpose: str) -> int:
    """Register ``value`` for ``purpose``; a value already registered is an error (ValueError)."""
    if value in STREAMS:
        raise ValueError(f"seed stream {value:#x} is registered twice: {STREAMS[value]!r} and {purpose!r}")
    STREAMS[value] = purpose
    return value


PRETRAIN = stream(0x0, "server pre-training of x_0 (core/method.py)")
DIRECTIONS = stream(1, "ZO-HFL's directions v_{i,r} and FedRZO_nn's (algorithms/zohfl.py, methods/fedrzo_nn.py)")
BATCHES = stream(2, "client minibatches (every method)")
SAMPLING = stream(3, "sampling of S_r and the stragglers (core/sampling.py)")
SERVER_BATCH = stream(4, "ZO-HFL's server minibatch of grad f1 (methods/zohfl.py)")
CONTROL = stream(0x43, "the server-only controls' minibatches (methods/controls.py)")
HOLDOUT = stream(0x51, "the holdout split of the bilevel tasks (tasks/bilevel.py)")
CORRUPT = stream(0x53, "label corruption of hyper-cleaning (tasks/hypergrad.py)")
QUADRATIC = stream(0x54, "the quadratic hyper-gradient problems (tasks/hypergrad.py)")
GLOBAL_DIRECTION = stream(0x61, "FedRZO_bl's global direction v_{T_r} (methods/fedrzo_bl.py)")
LOWER_CRN = stream(0x62, "FedRZO_bl's lower-level common random numbers (methods/fedrzo_bl.py)")
SPEED = stream(0x71, "device speeds (faults.py)")
FAULT = stream(0x72, "injected faults: crash, hang, corrupt (faults.py)")
ATTACK = stream(0x73, "the hostile clients' attack draws (faults.py)")
COMM = stream(0x74, "communication delays (download, upload) and the stragglers' multiplier per task or round "
                    "(faults.py: task_delays)")
AVAILABILITY = stream(0x75, "availability of a client for an asynchronous task or a synchronous round "
                            "(core/sampling.py)")
APHE = stream(0x81, "APHE's random Neumann depth (methods/afbo.py)")
SCAFFNEW_COIN = stream(0x91, "Scaffnew's coin: the local steps of a round, shared by every client "
                       "(methods/scaffnew.py)")
ADBO_OUTER = stream(0xAD, "ADBO's outer-step minibatches (methods/adbo.py; the second word)")
ADBO_CUT = stream(0xAE, "ADBO's cut-round minibatches (methods/adbo.py; the second word)")
SPLIT = stream(0x5E1, "the test / server / clients split of a run's data (tasks/data.py make_splits, tasks/sources.py "
                      "split_rows; SeedSequence([seed, SPLIT]))")
SPLIT_TOP_UP = stream(0x5E2, "the order in which split-fallback 'top-up' hands the examples it moved to the small "
                             "clients (tasks/data.py top_up)")
TEST_SPLIT = stream(0x7E57, "a node's held-out part of its own data, when it names no test-path (tasks/sources.py: "
                            "split_test; the generator is SeedSequence([seed, TEST_SPLIT]))")
TEST_SHARE = stream(0x7E58, "a simulated client's share of the test set, its held-out data for federated evaluation "
                            "(tasks/data.py: held_out_rows; SeedSequence([seed, TEST_SHARE]))")
