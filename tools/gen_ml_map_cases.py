"""gen_ml_map_cases.py: the map cases of gen_ml_tests.py (filled in below)."""


def add(g):
    pass
