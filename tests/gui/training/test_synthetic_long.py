"""The synthetic job (benchmarks, panel tests) runs as long as asked.

Before, its loss scale doubled every `growth_interval` clean steps with nothing but the
periodic spikes to halve it: after ~250,000 steps of the defaults (sooner with a short
interval) it reached infinity and the next statistics step raised OverflowError, so the
large logs a scale test needs could not be made. Like a real scaler, it now overflows
once the largest scaled gradient passes FP16's largest value.
"""

from __future__ import annotations

import math

from fpexplorer.gui.training.synthetic import synthetic_records
from fpexplorer.training.records import StepRecord


def test_the_scale_stays_where_fp16_gradients_stay_finite() -> None:
    # Growth on every clean step and no periodic spike: only the FP16 range stops it.
    records = synthetic_records(3000, growth_interval=1, overflow_every=10**9, stats_every=100)
    steps = [record for record in records if isinstance(record, StepRecord)]
    assert len(steps) == 3000
    assert all(math.isfinite(step.scale) for step in steps)
    # The scale oscillates just below the threshold: grows, overflows, halves, grows.
    skipped = [step for step in steps if step.skipped]
    assert len(skipped) > 100
    assert all(math.log2(step.scale) + (-12.0 - 6.0 * step.step / 3000) + 4 >= 16
               for step in skipped)  # fmt: skip
