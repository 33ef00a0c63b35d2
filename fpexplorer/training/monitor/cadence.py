"""When the monitor takes statistics: every N steps, or within a share of the wall time.
Torch-free."""

from __future__ import annotations

from collections import deque

# The default aims the whole run at 1.05x a bare loop: 4% measured by the cadence, and a
# margin for what the monitor's work costs the training steps themselves through the CPU's
# caches, which no clock inside it can see (0.5-1.2% on the built-in transformer, measured by
# `benchmarks/bench_monitor.py --in-process` against the cadence's own share, 0.047 at 0.05).
DEFAULT_STATS_BUDGET = 0.04
_PLAIN_WINDOW = 16  # recent plain steps whose median is "a step without statistics"


class StatsCadence:
    """Decides, before each step, whether it is a statistics step.

    `every=N`: steps 0, N, 2N... (0: never). `budget=b` (the default, 0.04): as often as
    keeps the monitor's whole measured cost within b of the wall time so far. That cost is
    the monitor's own time on every plain step (`monitor_time`: reading the cheap signals
    and writing the record) plus, for each statistics step, its duration minus that of a
    plain step without the monitor (the median recent plain step less its median monitor
    time). So a watched loop runs at about 1 + b times a bare one, more by what the
    monitor's work slows the training steps themselves through shared caches (hence the
    default 0.04, for a run at 1.05x). No clock inside the monitor sees that, nor can one:
    a run has no bare step to compare with, and the share differs by model (some 25-30 us
    per plain step beside the monitor's own ~37 us on the built-in mlp, whose step takes
    0.45-0.5 ms; ~20 us beside ~125 on the transformer, 6.8 ms a step; the step after a
    statistics step is 0.07 ms slower there, too little against one step's noise to charge
    from its clock; `benchmarks/bench_monitor.py` measures the whole). Where the cheap
    signals alone take more than the budget (the mlp: 1.14-1.16x), statistics are taken
    only where they must be. Step 0 always takes statistics, and with a budget so does the
    step after an alarm (a skipped step, a non-finite loss or norm). Step 0 is charged once
    the first plain step is measured, all it took beyond a plain step (first calls
    included: conservative, since a bare loop's first step is slow too), so on a short run
    its one-off cost delays the next statistics instead of adding to the budget.
    """

    def __init__(self, every: int | None = None, budget: float | None = None) -> None:
        if every is not None and budget is not None:
            raise ValueError("give stats_every or stats_budget, not both")
        if every is None and budget is None:
            budget = DEFAULT_STATS_BUDGET
        if every is not None and (isinstance(every, bool) or not isinstance(every, int)
                                  or every < 0):  # fmt: skip
            raise ValueError("stats_every must be a whole number >= 0 (0: off)")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                                   or not 0 <= budget <= 1):  # fmt: skip
            raise ValueError("stats_budget must be a share of the wall time, in [0, 1]")
        self.every = every
        self.budget = budget
        self._elapsed = 0.0  # charged wall time
        self._spent = 0.0  # extra time of the charged statistics steps
        self._plain: deque[float] = deque(maxlen=_PLAIN_WINDOW)
        self._plain_own: deque[float] = deque(maxlen=_PLAIN_WINDOW)  # the monitor's part
        self._last_extra: float | None = None
        self._alarm = False
        self._accounted = 0
        self._first: tuple[float, bool, float] | None = None  # the first step, not yet charged

    @property
    def spent_share(self) -> float:
        """The share of the charged wall time that statistics took so far (measured with a
        budget only: a fixed cadence has no use for the figures, and is 0 here)."""
        return self._spent / self._elapsed if self._elapsed else 0.0

    def account(
        self, duration: float, *, statistics: bool, alarm: bool, monitor_time: float = 0.0
    ) -> None:
        """Tell the cadence how the step went: its wall time (from the previous step) and,
        for a plain step, how much of it the monitor itself took."""
        self._alarm = alarm
        if self.every is not None:  # nothing to measure: called on every step, so at once
            return
        self._accounted += 1
        if self._accounted == 1:
            # The first step pays for first calls (allocations, tables, caches): what the
            # monitor added to it is known only once a plain step has been measured.
            self._first = (duration, statistics, monitor_time)
            return
        self._charge(duration, statistics=statistics, monitor_time=monitor_time)
        if self._first is not None and self._plain:
            first, self._first = self._first, None
            # Not a guide to what the next statistics step costs (first calls): charged only.
            self._charge(first[0], statistics=first[1], monitor_time=first[2], estimate=False)

    def _charge(
        self, duration: float, *, statistics: bool, monitor_time: float, estimate: bool = True
    ) -> None:
        self._elapsed += duration
        if not statistics:
            self._plain.append(duration)
            self._plain_own.append(monitor_time)
            self._spent += monitor_time
            return
        plain = self._plain_median()
        if plain is None:
            extra = duration / 2
        else:
            bare = plain - _median(self._plain_own)
            extra = max(duration - bare, 0.0)
        self._spent += extra
        if estimate:
            self._last_extra = extra

    def collect_next(self, step_index: int) -> bool:
        """Whether step `step_index` (the next one) takes statistics."""
        if self.every is not None:
            return self.every > 0 and step_index % self.every == 0
        assert self.budget is not None
        if step_index == 0 or (self._alarm and self.budget > 0):
            return True
        plain_steps = self._plain
        if not plain_steps:
            return False  # nothing measured yet to spend a share of
        # Until a charged statistics step is measured, assume it costs a plain step extra.
        extra = self._last_extra
        budget, spent, elapsed = self.budget, self._spent, self._elapsed
        if extra is not None:
            # The answer needs the median plain step only where the longest one could
            # change it (most steps are far from their turn): one max(), not a sort.
            if spent + extra > budget * (elapsed + max(plain_steps) + extra):
                return False
            plain = _median(plain_steps)
        else:
            plain = _median(plain_steps)
            extra = plain
        return spent + extra <= budget * (elapsed + plain + extra)

    def _plain_median(self) -> float | None:
        return _median(self._plain) if self._plain else None


def _median(values: deque[float]) -> float:
    """The median (upper middle) of a short window: called every step, so no statistics
    module overhead."""
    return sorted(values)[len(values) // 2]
