"""The AMP monitor, in parts that can be read and tested alone:

- `kernels`: histogram codes and threshold counts from bit patterns (torch);
- `thresholds`: each format's range and rounding thresholds, from the exact engine
  (torch-free);
- `cadence`: when a step takes statistics (torch-free);
- `plan`: what a statistics step queued, brought to the host in one named copy, and its
  decoding into the step record;
- `updates`: the lost-update statistic (the weights kept before the optimizer step, the
  updates that do not show in FP16);
- `device`: what the run ran on, tensor bytes;
- `ranks`: several ranks: one log per rank, the merged log, the exchange;
- `reduction`: each rank's own gradients checked before they are communicated (DDP, FSDP2);
- `amp_monitor`: `AmpMonitor`, the hooks and the per-step flow.
"""

from fpexplorer.training.monitor.amp_monitor import AmpMonitor, one_line_error
from fpexplorer.training.monitor.cadence import DEFAULT_STATS_BUDGET, StatsCadence
from fpexplorer.training.monitor.device import cpu_name, device_description
from fpexplorer.training.monitor.kernels import (
    BINADE_HI,
    BINADE_LO,
    binade_codes,
    binade_histogram,
    code_histogram,
    histogram_record,
)
from fpexplorer.training.monitor.thresholds import (
    DEFAULT_FORMATS,
    FormatRange,
    format_range,
    format_ranges,
)

# The default formats' ranges (the job writes them in a header it makes itself).
FORMAT_RANGES: tuple[FormatRange, ...] = format_ranges(DEFAULT_FORMATS)

__all__ = [
    "BINADE_HI",
    "BINADE_LO",
    "DEFAULT_FORMATS",
    "DEFAULT_STATS_BUDGET",
    "FORMAT_RANGES",
    "AmpMonitor",
    "FormatRange",
    "StatsCadence",
    "binade_codes",
    "binade_histogram",
    "code_histogram",
    "cpu_name",
    "device_description",
    "format_range",
    "format_ranges",
    "histogram_record",
    "one_line_error",
]
