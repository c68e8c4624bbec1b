"""One module per paper: its scales, experiment grids, cells and report.

Each declares its experiment table as ``PAPER`` (a :class:`~reproduction.papers.Paper`), which
:func:`~reproduction.papers.run_paper` runs; :data:`~reproduction.papers.PAPERS` lists them.
"""
