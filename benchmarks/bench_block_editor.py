"""What the block editor costs: one interaction, and a whole .npy tensor.

Builds the block editor view offscreen and measures, until the event loop has handled the
repaints a change asked for:

  drag step      one move of a dragged bar (an element's value changes: the exact
                 one-block quantizer runs and the bars, table and scale repaint)
  scale toggle   one click on a scale bit (every element moves)

then writes a float32 tensor to a temporary .npy file and times loading it: the block in
the editor (on the GUI thread) and the whole tensor quantized with its per-block error
statistics (on a worker thread), against a bare `quantize()` of the same tensor in the same
run, printed as a ratio (what the histogram and the worst blocks add).

    python benchmarks/bench_block_editor.py [--values 10000000] [--steps 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--values", type=int, default=10_000_000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--format", default="mxfp8_e4m3")
    args = parser.parse_args()

    import numpy as np
    from PySide6.QtWidgets import QApplication

    from fpexplorer.formats.block_quantize import quantize
    from fpexplorer.gui.formats.block_view import BlockEditorView

    app = QApplication.instance() or QApplication(sys.argv)
    view = BlockEditorView()
    view.state.set_format(args.format)
    view.resize(1280, 560)
    view.show()
    app.processEvents()

    def timed(action: Callable[[int], object]) -> list[float]:
        times = []
        for step in range(args.steps):
            start = time.perf_counter()
            action(step)
            app.processEvents()
            times.append((time.perf_counter() - start) * 1000)
        return times

    drags = timed(lambda step: view.state.drag_element(3, 0.5 + 0.01 * step))
    toggles = timed(lambda step: view.state.toggle_scale_bit(0))
    print(f"{args.format}, {view.state.format.block_size} elements, offscreen 1280x560:")
    for name, times in (("drag step", drags), ("scale toggle", toggles)):
        print(f"  {name:13s} median {statistics.median(times):6.1f} ms, max {max(times):6.1f} ms")

    rng = np.random.default_rng(0)
    columns = 10_000
    tensor = rng.standard_normal((max(args.values // columns, 1), columns)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tensor.npy"
        np.save(path, tensor)
        start = time.perf_counter()
        quantize(tensor, view.state.format)
        bare = time.perf_counter() - start
        start = time.perf_counter()
        view.open_npy(str(path))
        app.processEvents()
        in_editor = time.perf_counter() - start
        turns = 0
        while view.state.busy is not None:
            app.processEvents()
            time.sleep(0.005)
            turns += 1
        whole = time.perf_counter() - start
    assert view.state.tensor is not None, view.state.problem or view.state.note
    print(f"  .npy of {tensor.size:,} float32 values:")
    print(f"    block in the editor after     {in_editor * 1000:7.0f} ms (GUI thread)")
    print(f"    whole tensor analysed after   {whole * 1000:7.0f} ms (worker thread; the")
    print(f"      GUI thread handled events {turns} times meanwhile)")
    print(f"    bare quantize() of the tensor {bare * 1000:7.0f} ms")
    print(f"    ratio analysed / bare quantize: {whole / bare:.2f}x")
    view.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
