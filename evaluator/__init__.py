"""The evaluator: judges recorded episodes by their effects and reports on runs. It reads run
directories only (formats, scenarios, tasks below it; never the proxy or the runner).

Its packages, in pipeline order, each importing only those below it (pyproject.toml's contracts)
and only through their front doors (`__init__.py`, evaluator/front_door.py):

    proposals, rendering   init's proposals; report.html, terminal tables, junit.xml, Markdown
    gate, sweeps           the regression and sequential gates; sweep analysis
    aggregate              a run: the log scan, tallies, report sections, failure causes, the report
    judging                one episode: its verdict, live traffic's checks, side channels
    checks                 the checks, one module per concern, and their registry
    traces                 one episode's trace read: exchanges, identity, sessions, turns, usage
    statistics             intervals, exact tests, pass@k and pass^k, metrics across models
"""
