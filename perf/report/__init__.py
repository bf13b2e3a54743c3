"""Reports: the suite's tables, their schema, the markdown summary, the HTML page and its figures."""
