"""The examples in README's formats section run and print what the README says."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- section: formats -->")
    return text[start : text.index("<!-- end: formats -->", start)]


def test_readme_python_examples() -> None:
    blocks = re.findall(r"```pycon\n(.*?)```", _section(), flags=re.DOTALL)
    assert blocks, "no pycon examples in the formats section"
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for number, block in enumerate(blocks):
        test = parser.get_doctest(block, {}, f"README formats #{number}", str(README), 0)
        runner.run(test)
    assert runner.tries >= 10
    assert runner.failures == 0, f"{runner.failures} README example(s) print something else"


def test_readme_cli_example_is_real_output(capsys) -> None:  # type: ignore[no-untyped-def]
    from fpexplorer.cli import main

    block = re.search(r"```console\n\$ fpexplorer (.*?)\n(.*?)```", _section(), re.DOTALL)
    assert block is not None
    assert main(block.group(1).split()) == 0
    assert capsys.readouterr().out == block.group(2)


def test_readme_calc_examples_are_real_output(capsys) -> None:  # type: ignore[no-untyped-def]
    import shlex

    from fpexplorer.cli import main

    blocks = re.findall(r"```console\n\$ (fpexplorer calc .*?)\n(.*?)```", _section(), re.DOTALL)
    assert blocks, "no calc example in the formats section"
    for command, output in blocks:
        assert main(shlex.split(command)[1:]) == 0
        assert capsys.readouterr().out == output
