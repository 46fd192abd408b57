"""Quality filtering: the `quality` step, its heuristic filters and the fastText classifier
(docs/data-steps.md, docs/data-extract-quality.md).

    filter.py           QualityStep (the `quality` step): runs the filters in order
    boilerplate.py      template line removal
    gopher.py           Gopher quality and repetition rules
    c4.py, fineweb.py   C4's and FineWeb's rules
    classifier.py       the fastText quality classifier: training, scoring, `bessemer data quality-train`
"""
