"""The allocator's rule prior on behaviour: glossary lines read as facts, a titled
instruction as an instruction."""

from __future__ import annotations

from continual_lsp.lanes.reading import read
from continual_lsp.lanes.routing.allocator import behaviour_score


def test_a_bold_title_over_an_instruction_is_not_a_glossary_line() -> None:
    titled = behaviour_score(read("**Barrel exports**: Use `index.ts` files for clean imports"))
    glossary = behaviour_score(read("**Config**: defaults live in `config/default.toml`"))
    assert titled > glossary
    assert titled >= 0.5 > glossary


def test_a_command_glossary_line_stays_a_fact_even_when_it_reads_run() -> None:
    assert behaviour_score(read("`npm test`: Run the test suite.")) < behaviour_score(
        read("Run the test suite before you push.")
    )
