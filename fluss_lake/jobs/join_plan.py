"""A join of primary-key tables: its tree of equi-joins, how each side is probed, its result key, ``explain()``.

Inputs are named by aliases; the first one is the root and every :class:`Join` attaches one more input to an
alias already in the plan (a tree: A ⋈ B ⋈ C, stars and chains). Inside a job, columns are qualified as
``alias.column``.

A join runs as a *delta join* when every side can be probed through an index: for each join, the columns of
each side contain that side's primary key (a lookup) or its bucket-key prefix (a prefix lookup). Because those
indexes are made of primary-key columns, a row's join-key values never change: an update that "moves" a row to
another join key is a delete of the old key and an insert of the new one in the changelog.

Correct retractions need a result key that names every participating row: each input's primary-key columns
(or columns the join equates with them) must be among the result table's primary-key columns, so each result
row is an idempotent upsert or delete. LEFT joins are allowed where the right side is probed by its full primary
key and is a leaf of the tree (its key is then fixed by the left side, so null-padded rows keep a non-null key).

Columns of a LEFT join's right side are SQL's: NULL on unmatched rows, its join columns too (``c.cid IS NULL``
finds them), while a column named by the result table alone (no ``select=``) present on both sides is SQL's
``USING`` column (the left side's value). A result primary-key column keeps naming the row: mapped to a right-side
join column it takes the equal left-side value, never NULL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.table import Table

__all__ = ["Edge", "Explanation", "Join", "JoinPlan"]

JoinType = Literal["inner", "left"]
LIVE = "__live"


@dataclass(frozen=True)
class Join:
    """Attach input `right` to input `left` (already in the plan) where ``left.<l> == right.<r>`` for each pair.

    `on` is a mapping ``{left column: right column}``, a list of pairs, or a list of names both sides share.
    """

    left: str
    right: str
    on: tuple[tuple[str, str], ...]
    how: JoinType = "inner"

    def __init__(
        self,
        left: str,
        right: str,
        on: Mapping[str, str] | Sequence[str] | Sequence[tuple[str, str]],
        how: JoinType = "inner",
    ) -> None:
        if isinstance(on, Mapping):
            pairs = tuple((str(a), str(b)) for a, b in on.items())
        else:
            pairs = tuple((c, c) if isinstance(c, str) else (str(c[0]), str(c[1])) for c in on)
        if not pairs:
            raise InvalidConfigError(f"join {left} -> {right}: give at least one equality in on=")
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", right)
        object.__setattr__(self, "on", pairs)
        object.__setattr__(self, "how", how)


@dataclass(frozen=True)
class Edge:
    """A join as the jobs use it: probe columns on each side (an index of it when possible)."""

    parent: str
    child: str
    pairs: tuple[tuple[str, str], ...]
    how: JoinType
    child_index: str | None  # "pk", "prefix" or None (no index among the child's join columns)
    parent_index: str | None
    child_probe: tuple[str, ...]  # child columns probed (index columns; all join columns if no index)
    parent_probe: tuple[str, ...]

    def partner(self, side: str, column: str) -> str:
        """The other side's column equated with `column` of `side`."""
        for p, c in self.pairs:
            if side == self.parent and p == column:
                return c
            if side == self.child and c == column:
                return p
        raise KeyError(column)


@dataclass(frozen=True)
class Explanation:
    """Whether a join runs as a delta join and, if not, why; the strategy the job uses."""

    delta: bool
    strategy: Literal["delta", "stateful", "rejected"]
    reasons: tuple[str, ...]
    probes: tuple[str, ...] = field(default=())
    result_key: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        head = {
            "delta": "runs as a delta join (zero state: offsets only)",
            "stateful": "runs as a stateful regular join (both sides kept in operator state)",
            "rejected": "cannot run as a delta join",
        }[self.strategy]
        lines = [head, *[f"  probe: {p}" for p in self.probes], *[f"  not delta: {r}" for r in self.reasons]]
        if self.result_key:
            lines.append(f"  result key: {', '.join(self.result_key)}")
        return "\n".join(lines)


def index_columns(table: Table) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The indexes of a primary-key table: its primary key (a lookup; on a partitioned table it includes the
    partition columns) and, if the bucket key is a strict leading prefix of the key inside a partition, the
    partition columns followed by the bucket key (a prefix lookup), else ``()``."""
    pk, prefix = tuple(table.schema.primary_key), tuple(table.info.prefix_key)
    return pk, ((*table.partition_keys, *prefix) if prefix else ())


def _index_kind(table: Table, columns: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
    """Which index of `table` the join columns contain: its primary key, its (partition keys +) bucket-key
    prefix, or none. A partitioned side's index always holds its partition columns: a probe without them would
    have to search every partition."""
    if not table.is_primary_key_table:
        return None, ()
    pk, prefix = index_columns(table)
    if set(pk) <= set(columns):
        return "pk", pk
    if prefix and set(prefix) <= set(columns):
        return "prefix", prefix
    return None, ()


class JoinPlan:
    """The validated join: edges, qualified columns, result projection and key, delta eligibility."""

    def __init__(
        self,
        inputs: Mapping[str, Table],
        joins: Sequence[Join],
        result: Table,
        *,
        select: Mapping[str, str | pl.Expr] | None = None,
        where: Mapping[str, pl.Expr] | None = None,
        condition: pl.Expr | None = None,
    ) -> None:
        self.inputs = dict(inputs)
        self.aliases = list(self.inputs)
        self.result = result
        self.where = dict(where or {})
        self.condition = condition
        if len(self.aliases) < 2:
            raise InvalidConfigError("a join needs at least two inputs")
        for alias in self.aliases:
            if not alias or "." in alias:
                raise InvalidConfigError(f"input alias {alias!r}: use a non-empty name without '.'")
        for alias in self.where:
            if alias not in self.inputs:
                raise InvalidConfigError(f"where= names unknown input {alias!r}; inputs are {self.aliases}")
        self.edges = self._edges(joins)
        self.reasons = self._delta_reasons()
        self.classes = self._classes()
        self.projection, self.key_sources = self._projection(select)
        self._check_result()
        self.needed = self._needed_columns()

    # ------------------------------------------------------------ structure
    def _edges(self, joins: Sequence[Join]) -> list[Edge]:
        seen = {self.aliases[0]}
        edges = []
        for join in joins:
            if join.left not in self.inputs or join.right not in self.inputs:
                raise InvalidConfigError(f"join {join.left} -> {join.right}: unknown input; inputs are {self.aliases}")
            if join.left not in seen:
                raise InvalidConfigError(
                    f"join {join.left} -> {join.right}: {join.left!r} is not joined yet; list "
                    "joins so each one attaches a new input to the inputs before it"
                )
            if join.right in seen:
                raise InvalidConfigError(
                    f"join {join.left} -> {join.right}: {join.right!r} is joined already (joins "
                    "form a tree; put extra equalities into the same Join)"
                )
            if join.how not in ("inner", "left"):
                raise InvalidConfigError(
                    f"join {join.left} -> {join.right}: how={join.how!r} is not supported; use "
                    "'inner' or 'left' (put the preserved side on the left)"
                )
            parent, child = self.inputs[join.left], self.inputs[join.right]
            for table, alias, cols in (
                (parent, join.left, [p for p, _ in join.on]),
                (child, join.right, [c for _, c in join.on]),
            ):
                unknown = [c for c in cols if c not in table.schema.names]
                if unknown:
                    raise InvalidConfigError(f"join {join.left} -> {join.right}: {alias} has no column(s) {unknown}")
            ckind, cidx = _index_kind(child, [c for _, c in join.on])
            pkind, pidx = _index_kind(parent, [p for p, _ in join.on])
            cprobe = cidx or tuple(c for _, c in join.on)
            pprobe = pidx or tuple(p for p, _ in join.on)
            edges.append(Edge(join.left, join.right, join.on, join.how, ckind, pkind, cprobe, pprobe))
            seen.add(join.right)
        missing = [a for a in self.aliases if a not in seen]
        if missing:
            raise InvalidConfigError(f"inputs {missing} are not joined; add a Join for each input after the first")
        for edge in edges:
            if edge.how == "left":
                if edge.child_index != "pk":
                    raise InvalidConfigError(
                        f"LEFT join {edge.parent} -> {edge.child}: the right side must be joined on its whole primary "
                        f"key {list(self.inputs[edge.child].schema.primary_key)}; otherwise null-padded rows would "
                        "need null primary-key columns in the result table"
                    )
                if any(e.parent == edge.child for e in edges):
                    raise InvalidConfigError(
                        f"LEFT join {edge.parent} -> {edge.child}: the right side of a LEFT join "
                        "must be a leaf (join further inputs to the left side instead)"
                    )
        if self.condition is not None and any(e.how == "left" for e in edges):
            raise InvalidConfigError(
                "condition= (a filter on the joined row) needs INNER joins only; filter the inputs with where= instead"
            )
        return edges

    def _delta_reasons(self) -> list[str]:
        reasons = []
        for alias, table in self.inputs.items():
            if not table.is_primary_key_table:
                reasons.append(f"input {alias} ({table.path}) is a log table: it has no primary key to probe")
        for e in self.edges:
            for side, kind in ((e.child, e.child_index), (e.parent, e.parent_index)):
                table = self.inputs[side]
                if kind is None and table.is_primary_key_table:
                    cols = [c for _, c in e.pairs] if side == e.child else [p for p, _ in e.pairs]
                    pk, prefix = index_columns(table)
                    if table.is_partitioned:
                        index = (
                            f"neither its primary key {list(pk)} nor its partition keys + bucket-key prefix "
                            f"{list(prefix)}"
                            if prefix
                            else f"not its primary key {list(pk)} (its bucket key "
                            f"{list(table.info.bucket_keys)} is no prefix of it)"
                        )
                        missing = [c for c in table.partition_keys if c not in cols]
                        if missing:
                            index += f"; a partitioned side must be joined on its partition columns {missing} too"
                    else:
                        index = (
                            f"neither its primary key {list(pk)} nor a bucket-key prefix of it (bucket key "
                            f"{list(table.info.bucket_keys)})"
                        )
                    reasons.append(
                        f"join {e.parent} -> {e.child}: the join columns {cols} of {side} ({table.path}) "
                        f"contain {index}, so changes on the other side cannot probe it"
                    )
        return reasons

    def neighbours(self, alias: str) -> list[tuple[Edge, str]]:
        """Edges touching `alias` with the alias at their other end."""
        out = []
        for e in self.edges:
            if e.parent == alias:
                out.append((e, e.child))
            elif e.child == alias:
                out.append((e, e.parent))
        return out

    def left_children(self) -> set[str]:
        return {e.child for e in self.edges if e.how == "left"}

    # ------------------------------------------------------------ result
    def _classes(self) -> dict[str, list[str]]:
        """Equivalence classes of qualified columns under the join equalities (member -> class, root first)."""
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            while parent.setdefault(x, x) != x:
                x = parent[x]
            return x

        for e in self.edges:
            for p, c in e.pairs:
                a, b = find(f"{e.parent}.{p}"), find(f"{e.child}.{c}")
                if a != b:
                    parent[b] = a
        order = {a: i for i, a in enumerate(self.aliases)}
        groups: dict[str, list[str]] = {}
        for member in list(parent):
            groups.setdefault(find(member), []).append(member)
        out = {}
        for members in groups.values():
            members.sort(key=lambda m: order[m.split(".", 1)[0]])
            for m in members:
                out[m] = members
        return out

    def _column_expr(self, qualified: str) -> pl.Expr:
        members = self.classes.get(qualified)
        if members and len(members) > 1:  # equal where both sides exist; the non-null one for padded rows
            return pl.coalesce([pl.col(m) for m in members])
        return pl.col(qualified)

    def _source_expr(self, qualified: str, *, key: bool) -> pl.Expr:
        """A result column taken from an input column. A column of a LEFT join's right side is that side's own
        value, NULL on unmatched rows as in SQL (its join columns too); a result key column must name padded rows
        as well, so it is, like columns of inner sides, the first non-null member of its join class."""
        if not key and qualified.split(".", 1)[0] in self.left_children():
            return pl.col(qualified)
        return self._column_expr(qualified)

    def _projection(self, select: Mapping[str, str | pl.Expr] | None) -> tuple[dict[str, pl.Expr], dict[str, str]]:
        result_cols = list(self.result.schema.names)
        exprs: dict[str, pl.Expr] = {}
        sources: dict[str, str] = {}
        given = dict(select or {})
        key = set(self.result.schema.primary_key)
        lefts = self.left_children()
        unknown = [c for c in given if c not in result_cols]
        if unknown:
            raise InvalidConfigError(f"select= names column(s) {unknown} the result table {self.result.path} lacks")
        for col in result_cols:
            if col in given:
                src = given[col]
                if isinstance(src, str):
                    alias, _, name = src.partition(".")
                    if alias not in self.inputs or name not in self.inputs[alias].schema.names:
                        raise InvalidConfigError(
                            f"select[{col!r}] = {src!r}: write 'alias.column' with an input alias of {self.aliases}"
                        )
                    exprs[col], sources[col] = self._source_expr(src, key=col in key), src
                else:
                    exprs[col] = src
                continue
            found = [f"{a}.{col}" for a, t in self.inputs.items() if col in t.schema.names]
            if not found:
                raise InvalidConfigError(
                    f"result column {col!r} is in no input; map it with select={{{col!r}: 'alias.column'}}}}"
                )
            if len({id(self.classes.get(f, [f])) for f in found}) > 1:
                raise InvalidConfigError(
                    f"result column {col!r} is in several inputs {found}; choose one with select={{{col!r}: ...}}"
                )
            # by name: the preserved side's column if it has one (SQL's USING column), else the right side's own
            src = next((f for f in found if f.split(".", 1)[0] not in lefts), found[0])
            exprs[col], sources[col] = self._source_expr(src, key=col in key), src
        return {c: e.alias(c) for c, e in exprs.items()}, sources

    def _check_result(self) -> None:
        result = self.result
        if not result.is_primary_key_table:
            raise InvalidConfigError(
                f"result table {result.path} needs a primary key covering the inputs' keys "
                "(every result row must be an idempotent upsert or delete)"
            )
        if result.info.options.get("table.merge-engine"):
            raise InvalidConfigError(
                f"result table {result.path} must use the default merge engine (last row); "
                f"it has {result.info.options['table.merge-engine']}"
            )
        if result.info.options.get(opt.DELETE_BEHAVIOR, "allow") != "allow":
            raise InvalidConfigError(
                f"result table {result.path} must allow deletes (table.delete.behavior="
                "'allow'): retractions are deletes"
            )
        covered = set()
        for col in result.schema.primary_key:
            src = self.key_sources.get(col)
            if src is None:
                raise InvalidConfigError(
                    f"result primary-key column {col!r} must be a plain input column "
                    "(select={col: 'alias.column'}), not an expression"
                )
            covered.update(self.classes.get(src, [src]))

        # a row of the child of a to-one join is named by the parent's join columns (and the reverse)
        def known(alias: str) -> bool:
            return all(f"{alias}.{c}" in covered for c in self.inputs[alias].schema.primary_key)

        def add(alias: str, columns: Sequence[str]) -> None:
            for c in columns:
                covered.update(self.classes.get(f"{alias}.{c}", [f"{alias}.{c}"]))

        changed = True
        while changed:
            changed = False
            for e in self.edges:
                for src, dst in ((e.parent, e.child), (e.child, e.parent)):
                    dst_cols = {c for _, c in e.pairs} if dst == e.child else {p for p, _ in e.pairs}
                    if known(src) and not known(dst) and set(self.inputs[dst].schema.primary_key) <= dst_cols:
                        add(src, self.inputs[src].schema.names)  # the source row fixes its join columns
                        if known(dst):
                            changed = True
        for alias, table in self.inputs.items():
            missing = [c for c in table.schema.primary_key if f"{alias}.{c}" not in covered]
            if missing:
                raise InvalidConfigError(
                    f"the result key {list(result.schema.primary_key)} of {result.path} does not cover the primary "
                    f"key of input {alias} (missing {missing}); each result row must name the input rows it joins, "
                    "or retractions cannot be idempotent deletes"
                )
        lefts = self.left_children()
        key = set(result.schema.primary_key)
        for col, src in self.key_sources.items():
            if src.split(".", 1)[0] not in lefts or result.schema.column(col).nullable:
                continue
            partners = [m for m in self.classes.get(src, [src]) if m.split(".", 1)[0] not in lefts]
            if col in key and partners:
                continue  # a key column takes the left side's equal value on padded rows
            hint = f", or take the left side's equal column: select={{{col!r}: {partners[0]!r}}}" if partners else ""
            raise InvalidConfigError(
                f"result column {col!r} comes from {src}, the right side of a LEFT join, which is NULL on "
                f"unmatched rows (as in SQL); make {col!r} nullable in the result table{hint}"
            )

    def _needed_columns(self) -> dict[str, list[str]]:
        refs: set[str] = set()
        for expr in self.projection.values():
            refs.update(expr.meta.root_names())
        if self.condition is not None:
            refs.update(self.condition.meta.root_names())
        need: dict[str, set[str]] = {a: set(t.schema.primary_key) for a, t in self.inputs.items()}
        for ref in refs:
            alias, _, col = ref.partition(".")
            if alias in need:
                need[alias].add(col)
        for e in self.edges:
            need[e.parent].update(p for p, _ in e.pairs)
            need[e.child].update(c for _, c in e.pairs)
        for alias, expr in self.where.items():
            need[alias].update(expr.meta.root_names())
        return {a: [c for c in t.schema.names if c in need[a]] for a, t in self.inputs.items()}

    # ------------------------------------------------------------ explain
    def explain(self, strategy: Literal["delta", "stateful", "rejected"] | None = None) -> Explanation:
        """Whether this plan runs as a delta join, how each side is probed, or why not."""
        probes = []
        for e in self.edges:
            for side, kind, cols in (
                (e.child, e.child_index, e.child_probe),
                (e.parent, e.parent_index, e.parent_probe),
            ):
                if kind is not None:
                    partitioned = self.inputs[side].is_partitioned
                    how = (
                        "lookup by primary key"
                        if kind == "pk"
                        else "prefix lookup by partition keys + bucket key"
                        if partitioned
                        else "prefix lookup by bucket key"
                    )
                    if partitioned:
                        how += " (routed to the partition of each key)"
                    probes.append(
                        f"changes joining {e.parent} -> {e.child} probe {side} ({self.inputs[side].path}) "
                        f"by {list(cols)}: {how}"
                    )
        delta = not self.reasons
        if strategy is None:
            strategy = "delta" if delta else "rejected"
        return Explanation(delta, strategy, tuple(self.reasons), tuple(probes), tuple(self.result.schema.primary_key))

    # ------------------------------------------------------------ helpers for the jobs
    def result_key(self) -> list[str]:
        return list(self.result.schema.primary_key)

    def qualify(self, alias: str, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame`'s columns (``__live`` too) named ``alias.column``; a renamed shallow copy, no Polars query."""
        out = frame.clone()  # shares the buffers: renaming the copy leaves `frame` as it was
        out.columns = [f"{alias}.{c}" for c in frame.columns]
        return out

    def live(self, alias: str, frame: pl.DataFrame, found: pl.Series | None = None) -> pl.DataFrame:
        """`frame` (unqualified rows of `alias`) with ``__live``: present (`found`) and passing where[alias]."""
        expr = self.where.get(alias)
        if expr is None and LIVE not in frame.columns:  # no filter on this input: the flag without a Polars query
            flag = pl.Series(LIVE, found, dtype=pl.Boolean) if found is not None else None
            if flag is None:
                flag = pl.repeat(True, frame.height, dtype=pl.Boolean, eager=True).alias(LIVE)
            return frame.hstack([flag])
        live = pl.lit(True) if expr is None else expr.fill_null(False)
        if found is not None:
            live = live & pl.Series(found)
        return frame.with_columns(live.alias(LIVE))
