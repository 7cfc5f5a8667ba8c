"""The quants' notebook, examples/notebooks/backtest.ipynb, runs top to bottom in a fresh
kernel from its own directory (as a reader opening it there would) and shows its plots and
the rule-change comparison. nbclient and ipykernel are test requirements: without them
this test fails, it does not skip."""

from __future__ import annotations

import time

from conftest import EXAMPLES

NOTEBOOK = EXAMPLES / "notebooks" / "backtest.ipynb"


def outputs(cell) -> str:
    """The text a cell printed or displayed."""
    out = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            out.append(o["text"])
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
    return "".join(out)


def tagged(nb, tag: str):
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"one cell tagged {tag!r}"
    return cells[0]


def test_the_stored_notebook_has_no_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for c in nb.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, "commit the notebook without outputs"


def test_the_notebook_runs(monkeypatch):
    # Imported here so that a missing package fails this test instead of skipping it.
    import ipykernel  # noqa: F401  (the kernel nbclient starts: this interpreter's)
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MPLBACKEND", "Agg")  # the kernel inherits the environment
    monkeypatch.delenv("RISK_EXAMPLES", raising=False)  # found from the working directory
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    start = time.monotonic()
    client.execute()  # a cell's error raises nbclient's CellExecutionError
    print(f"notebook executed in {time.monotonic() - start:.1f} s")

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    errors = [o for c in code for o in c.outputs if o["output_type"] == "error"]
    assert not errors
    # the four figures: score distributions, PR curves, decisions per day, the comparison
    pngs = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 4, f"{len(pngs)} plots"
    text = "".join(outputs(c) for c in code)
    assert "auprc_model" in text and "labels_refused" in text
    compared = outputs(tagged(nb, "compare"))
    assert "decisions change" in compared and "R_CT_SMALL_BURST_HARD" in compared
    assert "-> decline" in compared
    assert outputs(tagged(nb, "verdict")).startswith("verdict: cost ")
