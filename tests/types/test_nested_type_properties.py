"""Property: every nested Fluss type string (canonical spelling) parses, prints back identically, gives the same
Polars dtype through Arrow, and survives the table schema's persisted form."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.types import arrow_type_name, parse_type, to_polars_dtype

LEAVES = ["BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "STRING", "BYTES", "DATE", "TIME",
          "DECIMAL(10,2)", "TIMESTAMP(3)", "TIMESTAMP(9)", "TIMESTAMP_LTZ(6)"]
marker = st.sampled_from(["", " NOT NULL"])
names = st.sampled_from(["a", "b", "zip", "`two words`", "x_1"])


def _rows(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    fields = st.lists(st.tuples(names, children, marker), min_size=1, max_size=3, unique_by=lambda f: f[0])
    return fields.map(lambda fs: "ROW<" + ", ".join(f"{n} {t}{m}" for n, t, m in fs) + ">")


types = st.recursive(
    st.sampled_from(LEAVES),
    lambda children: st.one_of(
        st.tuples(children, marker).map(lambda p: f"ARRAY<{p[0]}{p[1]}>"),
        st.tuples(st.sampled_from(LEAVES), children, marker).map(lambda p: f"MAP<{p[0]}, {p[1]}{p[2]}>"),
        _rows(children),
    ),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None)
@given(text=types)
def test_type_strings_print_back_identically_and_persist(text: str) -> None:
    kind, nullable = parse_type(text)
    assert nullable and arrow_type_name(kind) == text
    assert to_polars_dtype(kind) == to_polars_dtype(text)
    column = Schema.from_json(Schema.of({"c": text}).to_json()).column("c")
    assert column.type_name == text and column.dtype == to_polars_dtype(text)
