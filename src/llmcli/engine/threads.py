"""How many threads llama.cpp computes with, chosen while it runs from what it measures.

llama.cpp's compute threads meet at a barrier after every graph node, so one thread that the OS
preempts (another process wants the core) stalls them all: next to one busy process, two threads
on two cores decode slower than one. No fixed count is right on a shared machine, so when the user
gave none, `ThreadPolicy` picks decode's count from measured seconds per token and checks again
when the machine changes; `LoadFollower` picks prefill's from the run queue (see there why).

The policy is a pure function of the step times it is shown (`observe`), so its decisions are
tested without timing anything:
- it starts from `start` (all cores, or fewer when other processes are already runnable);
- it probes: each candidate in turn for `probe_steps` steps, the first step after a switch not
  counted (thread start-up), and settles on the lowest mean; a candidate whose steps already add up
  to more than the best one's whole probe is dropped at once (it cannot win);
- settled, it keeps a short window of recent step times; when their mean drifts from the one it
  settled on by more than `drift` (a busy process started or stopped), it probes again at once;
- otherwise it re-checks the other candidates every `recheck` steps, and doubles that interval
  (up to `max_recheck`) each time the check confirms its choice, so a quiet machine pays little.
Means, not medians: next to busy processes a thread count's step times have a heavy tail. Measured
here with two busy processes on two cores, two threads took a median 31 ms per token against one
thread's 25 ms, but a mean 96 ms against 29 ms: one step in five waits for a preempted thread, for
up to two seconds. Tokens per second is one over the mean, so the mean is what is compared.
Candidates are all cores, all but one, half, and one, and as many as the run queue leaves free
(`read_busy`): on a machine with many cores a busy process costs one core, not all of them. Those
the run queue leaves no core for are not measured at all.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux); None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("model name", "hardware", "cpu model"):
                    return value.strip() or None
    except OSError:
        pass
    return None


def physical_cores() -> int:
    """Physical CPU cores (llama.cpp runs best with one thread per core), else logical CPUs."""
    try:
        cores: set[tuple[str, str]] = set()
        phys = core = ""
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = value.strip()
                elif key == "core id":
                    core = value.strip()
                    cores.add((phys, core))
        if cores:
            return max(1, min(len(cores), len(os.sched_getaffinity(0))))
    except (OSError, AttributeError):
        pass
    return max(1, (os.cpu_count() or 2) // 2)


def candidates(cores: int) -> list[int]:
    """The thread counts worth trying on `cores` physical cores, most first."""
    return sorted({cores, max(1, cores - 1), max(1, cores // 2), 1}, reverse=True)


def busy_others(cores: int, stat_path: str = "/proc/stat", own: int | None = None) -> int:
    """Runnable threads of other processes (`procs_running` less this process's own running
    threads), capped at `cores`; 0 if unknown."""
    try:
        with open(stat_path, encoding="ascii") as f:
            for line in f:
                if line.startswith("procs_running"):
                    mine = own if own is not None else _own_running()
                    return max(0, min(cores, int(line.split()[1]) - mine))
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _own_running() -> int:
    """This process's threads in state R (running or runnable), at least 1 (the caller)."""
    running = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                    running += f.read().rpartition(")")[2].split()[0] == "R"
            except (OSError, IndexError):
                continue
    except OSError:
        return 1
    return max(1, running)


def start_for(cores: int, busy: int) -> int:
    """Where to begin: a core for each thread that will not have to wait for a busy one."""
    options = candidates(cores)
    free = cores - busy
    return next((n for n in options if n <= max(1, free)), options[-1])


@dataclass
class Decision:
    step: int  # the step (token for decode, batch for prefill) after which it applied
    threads: int
    reason: str  # "probe", "drift", "recheck": why it was measuring; "settled": the outcome

    def as_dict(self) -> dict:
        return {"step": self.step, "threads": self.threads, "reason": self.reason}


@dataclass
class ThreadPolicy:
    options: list[int]  # candidate thread counts (`candidates`)
    start: int  # the first choice (`start_for`)
    probe_steps: int = 4  # steps measured per candidate in a full probe (half that in a re-check)
    window: int = 16  # recent steps whose mean is watched for drift
    drift: float = 0.5  # relative change of that mean that means the machine changed
    recheck: int = 128  # steps between re-checks of the other candidates, at first
    max_recheck: int = 1024  # ... doubling up to this while they keep confirming the choice
    # other processes' runnable threads, read when a probe begins (`busy_others`); None: not read
    read_busy: Callable[[], int] | None = None
    decisions: list[Decision] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.current = self.start
        self.step = 0
        self.used: set[int] = {self.start}
        self._interval = self.recheck
        self._settled_at = 0
        self._reference: float | None = None
        self._recent: list[float] = []
        self._probing = False
        self._confirm: tuple[int, float] | None = None  # (count left, its measured mean)
        if len(self.options) > 1:
            self._probe("probe", others_only=False)

    def observe(self, threads: int, seconds_per_token: float) -> int:
        """One step ran with `threads` at this cost; returns the thread count for the next step."""
        self.step += 1
        if len(self.options) < 2:
            return self.current
        if self._probing:
            return self._probe_step(threads, seconds_per_token)
        self._recent = [*self._recent, seconds_per_token][-self.window :]
        if len(self._recent) >= max(2, self.window // 2):
            if self._reference is None:  # the settled count's own pace, measured in normal steps
                self._reference = statistics.fmean(self._recent)
                if self._confirm is not None:
                    return self._check_switch()
            elif self._drifted():
                return self._probe("drift", others_only=False)
        if self.step - self._settled_at >= self._interval:
            return self._probe("recheck", others_only=True)
        return self.current

    # -- measuring ---------------------------------------------------------------------------

    def _worth_trying(self) -> list[int]:
        """The candidates that leave no thread waiting for a core a busy process holds. Trying one
        that does is what costs: with two busy processes on two cores, a two-thread step took up
        to two seconds. The run queue says so before any step is paid for."""
        if self.read_busy is None:
            return self.options
        free = max(1, max(self.options) - self.read_busy())
        # the free cores themselves are a candidate too: 12 of 16 when four are busy
        return sorted({n for n in self.options if n <= free} | {free}, reverse=True)

    def _probe(self, reason: str, *, others_only: bool) -> int:
        """Measure the candidates, the current one first (it needs no switch). A re-check measures
        only the others, for fewer steps, against the current one's recent window; so does a
        probe when the run queue rules the current count out. Candidates the run queue rules
        out are not measured."""
        allowed = self._worth_trying()
        self._probing, self._reason, self._before = True, reason, self.current
        self._samples: dict[int, list[float]] = {}
        if others_only or self.current not in allowed:
            self._samples[self.current] = list(self._recent)
        self._need = max(1, self.probe_steps // 2) if reason == "recheck" else self.probe_steps
        order = [self.current] + [n for n in allowed if n != self.current]
        self._queue = [n for n in order if n not in self._samples]
        self._skip = False
        self._recent = []
        if not self._queue:  # nothing else worth a step: keep the count, look again later
            self._probing = False
            self._reference = None
            self._settled_at = self.step
            return self.current
        return self.current if self._queue[0] == self.current else self._switch(self._queue[0], reason)

    def _probe_step(self, threads: int, t: float) -> int:
        if self._skip:
            self._skip = False  # the first step after a switch pays for waking the threads
            return self.current
        measured = self._samples.setdefault(threads, [])
        measured.append(t)
        if len(measured) < self._need and not self._beaten(threads):
            return self.current
        if threads in self._queue:
            self._queue.remove(threads)
        if self._queue:
            return self._switch(self._queue[0], self._reason)
        return self._settle()

    def _beaten(self, threads: int) -> bool:
        """The steps measured for `threads` already cost more than a whole probe of a candidate
        measured before: its mean can only lose, so stop paying for it."""
        spent = sum(self._samples[threads])
        return any(
            n != threads and len(ts) >= self._need and spent > statistics.fmean(ts) * self._need
            for n, ts in self._samples.items()
        )

    def _settle(self) -> int:
        def cost(n: int) -> tuple[float, int]:
            return statistics.fmean(self._samples[n]), -n  # a tie goes to more threads

        best = min((n for n in self._samples if self._samples[n]), key=cost)
        kept = self._reason == "recheck" and best == self._before
        self._interval = min(self.max_recheck, self._interval * 2) if kept else self.recheck
        self._probing = False
        self._reference = None
        self._settled_at = self.step
        self._recent = []
        self._confirm = None
        if best != self._before:  # to be confirmed at its steady pace (see _check_switch)
            self._confirm = (self._before, statistics.fmean(self._samples[self._before] or [float("inf")]))
        if best != self.current:
            self.current = best
            self.used.add(best)
        self.decisions.append(Decision(self.step, best, "settled"))
        return best

    def _check_switch(self) -> int:
        """A few steps after switching, a count can look faster than it is: threads that just woke
        get the scheduler's favour over a busy process for a moment. So a switch stands only if the
        new count's steady pace still beats what the old one measured; else go back, and re-check
        less often."""
        assert self._confirm is not None and self._reference is not None
        old, old_mean = self._confirm
        self._confirm = None
        if self._reference <= old_mean * 1.02:
            return self.current
        self._interval = min(self.max_recheck, self._interval * 2)
        self.current = old
        self._reference = None
        self._recent = []
        self._settled_at = self.step
        self.decisions.append(Decision(self.step, old, "settled"))
        return old

    def _switch(self, threads: int, reason: str) -> int:
        self.current = threads
        self.used.add(threads)
        self._skip = True  # the first step after a switch is not counted (it wakes the threads)
        self.decisions.append(Decision(self.step, threads, reason))
        return threads

    def _drifted(self) -> bool:
        reference = self._reference or 0.0
        return abs(statistics.fmean(self._recent) - reference) > self.drift * reference

    # -- reporting ---------------------------------------------------------------------------

    def summary(self) -> dict:
        """What the `--json` record and `/stats` show for this phase: the count in use, every count
        used, and each settled choice that changed it (the step it applied from, and why)."""
        changes, last = [], self.start
        for d in self.decisions:
            if d.reason == "settled" and d.threads != last:
                changes.append({"step": d.step, "threads": d.threads})
                last = d.threads
        return {"threads": self.current, "used": sorted(self.used), "changes": changes}


@dataclass
class LoadFollower:
    """Prefill's thread count: at the start of each prompt, and again when a batch's pace drifts,
    the count that leaves no thread waiting for a busy core (`start_for` on `busy_others`).

    Prefill is compute-bound and comes in a few large batches, so trying a count that loses costs
    a whole batch; measured on this machine, comparing counts on small batches cost 8-13% of a
    2,560-token prefill, more than a wrong guess from the run queue does. The run queue is read,
    not guessed: other processes' runnable threads, this one's own excluded."""

    cores: int
    drift: float = 0.5
    read_busy: Callable[[int], int] = busy_others

    def __post_init__(self) -> None:
        self.current = start_for(self.cores, self.read_busy(self.cores))
        self.start = self.current
        self.used: set[int] = {self.current}
        self.changes: list[dict] = []
        self.step = 0
        self._reference: float | None = None

    def begin(self) -> int:
        """A new prompt: look at the run queue again."""
        self._reference = None
        return self._choose()

    def observe(self, seconds_per_token: float) -> int:
        self.step += 1
        if self._reference is None:
            self._reference = seconds_per_token
        elif abs(seconds_per_token - self._reference) > self.drift * self._reference:
            self._reference = None
            return self._choose()
        return self.current

    def _choose(self) -> int:
        wanted = start_for(self.cores, self.read_busy(self.cores))
        if wanted != self.current:
            self.current = wanted
            self.used.add(wanted)
            self.changes.append({"step": self.step, "threads": wanted})
        return self.current

    def summary(self) -> dict:
        return {"threads": self.current, "used": sorted(self.used), "changes": list(self.changes)}
