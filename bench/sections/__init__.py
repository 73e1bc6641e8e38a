"""The bench's sections, each `async (tmp, agents, rows) -> None` appending its table rows; run.SECTIONS names them."""
