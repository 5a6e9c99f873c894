//! Queries as a small AST: generated at random from a switchable set of
//! features, rendered in a dialect both SQLite and PostgreSQL read the same
//! way (every operator parenthesised, NULL ordering explicit), and
//! simplified clause by clause when a failing case is minimised.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use super::schema::{Lit, Schema, Ty, DATES};

/// What the generator may use. Turn a feature on once the engine (direct
/// evaluation or maintained views) supports it.
#[derive(Clone, Debug)]
pub struct Features {
    /// Inner equi-joins.
    pub joins: bool,
    pub left_joins: bool,
    /// Joins on two columns.
    pub multi_column_joins: bool,
    /// Two joins in one FROM.
    pub join_chains: bool,
    /// Subqueries in FROM (and joined).
    pub subqueries: bool,
    /// Render subqueries in FROM as non-recursive `WITH` instead.
    pub with_cte: bool,
    pub union: bool,
    pub union_all: bool,
    pub group_by: bool,
    /// Aggregates without GROUP BY (one row, even over no rows).
    pub global_aggregates: bool,
    pub having: bool,
    pub count_distinct: bool,
    pub avg: bool,
    pub distinct: bool,
    /// ORDER BY ... LIMIT (top-k).
    pub order_limit: bool,
    pub offset: bool,
    /// ORDER BY a column that is not in the select list.
    pub order_by_hidden: bool,
    /// ORDER BY ... LIMIT over a UNION.
    pub union_order_limit: bool,
    pub case_expr: bool,
    pub coalesce: bool,
    pub like: bool,
    pub in_list: bool,
    pub between: bool,
    pub cast: bool,
    /// lower, upper, length, abs, substr.
    pub functions: bool,
    /// `text || text`.
    pub concat: bool,
    /// Integer `/` and `%` by a positive constant.
    pub int_division: bool,
    /// CASE, NOT, IS NULL, IN, BETWEEN, LIKE and CAST over aggregates and
    /// group keys (in the select list and HAVING).
    pub rich_grouped_exprs: bool,
    /// GROUP BY an expression rather than a column.
    pub group_by_exprs: bool,
    /// Columns of type date (compared, grouped, joined, MIN/MAX; no date
    /// arithmetic, which SQLite lacks).
    pub dates: bool,
}

impl Features {
    /// Everything the generator knows.
    pub fn all() -> Features {
        Features {
            joins: true,
            left_joins: true,
            multi_column_joins: true,
            join_chains: true,
            subqueries: true,
            with_cte: true,
            union: true,
            union_all: true,
            group_by: true,
            global_aggregates: true,
            having: true,
            count_distinct: true,
            avg: true,
            distinct: true,
            order_limit: true,
            offset: true,
            order_by_hidden: true,
            union_order_limit: true,
            case_expr: true,
            coalesce: true,
            like: true,
            in_list: true,
            between: true,
            cast: true,
            functions: true,
            concat: true,
            int_division: true,
            rich_grouped_exprs: true,
            group_by_exprs: true,
            dates: true,
        }
    }

    /// What direct evaluation of a SELECT supports today: one table, WHERE,
    /// GROUP BY with aggregates and HAVING, DISTINCT, ORDER BY, LIMIT/OFFSET.
    pub fn direct() -> Features {
        Features {
            joins: false,
            left_joins: false,
            multi_column_joins: false,
            join_chains: false,
            subqueries: false,
            with_cte: false,
            union: false,
            union_all: false,
            // See `view_features` in differential.rs.
            dates: false,
            ..Features::all()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFn {
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

#[derive(Clone, Debug, PartialEq)]
pub enum E {
    Col {
        qual: String,
        name: String,
        ty: Ty,
    },
    Lit(Lit, Ty),
    Arith(Arith, Box<E>, Box<E>),
    Cmp(Cmp, Box<E>, Box<E>),
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
    Not(Box<E>),
    IsNull(Box<E>, bool),
    InList(Box<E>, Vec<Lit>, bool),
    Between(Box<E>, Lit, Lit, bool),
    Like(Box<E>, String, bool),
    Case(Vec<(E, E)>, Option<Box<E>>),
    Coalesce(Vec<E>),
    /// lower, upper, length, abs, substr (with constant extra arguments).
    Func(&'static str, Vec<E>),
    Cast(Box<E>, Ty),
    Concat(Box<E>, Box<E>),
    Agg(AggFn, Option<Box<E>>, bool),
    /// The parameter `$1` of a prepared statement.
    Param(Ty),
}

impl E {
    pub fn ty(&self) -> Ty {
        match self {
            E::Col { ty, .. } | E::Lit(_, ty) | E::Cast(_, ty) | E::Param(ty) => *ty,
            E::Arith(_, a, b) => {
                if a.ty() == Ty::Num || b.ty() == Ty::Num {
                    Ty::Num
                } else {
                    Ty::Int
                }
            }
            E::Cmp(..)
            | E::And(..)
            | E::Or(..)
            | E::Not(_)
            | E::IsNull(..)
            | E::InList(..)
            | E::Between(..)
            | E::Like(..) => Ty::Bool,
            E::Case(whens, otherwise) => {
                let mut tys: Vec<Ty> = whens.iter().map(|(_, t)| t.ty()).collect();
                tys.extend(otherwise.iter().map(|o| o.ty()));
                unify(&tys)
            }
            E::Coalesce(args) => unify(&args.iter().map(|a| a.ty()).collect::<Vec<_>>()),
            E::Func(name, args) => match *name {
                "length" => Ty::Int,
                "abs" => args[0].ty(),
                _ => Ty::Text,
            },
            E::Concat(..) => Ty::Text,
            E::Agg(f, arg, _) => match f {
                AggFn::CountStar | AggFn::Count => Ty::Int,
                AggFn::Avg => Ty::Num,
                _ => arg.as_ref().unwrap().ty(),
            },
        }
    }

    pub fn render(&self) -> String {
        match self {
            E::Col { qual, name, .. } => format!("{qual}.{name}"),
            E::Param(_) => "$1".into(),
            E::Lit(l, _) => l.to_string(),
            E::Arith(op, a, b) => {
                let op = match op {
                    Arith::Add => "+",
                    Arith::Sub => "-",
                    Arith::Mul => "*",
                    Arith::Div => "/",
                    Arith::Mod => "%",
                };
                format!("({} {op} {})", a.render(), b.render())
            }
            E::Cmp(op, a, b) => {
                let op = match op {
                    Cmp::Eq => "=",
                    Cmp::Ne => "<>",
                    Cmp::Lt => "<",
                    Cmp::Le => "<=",
                    Cmp::Gt => ">",
                    Cmp::Ge => ">=",
                };
                format!("({} {op} {})", a.render(), b.render())
            }
            E::And(a, b) => format!("({} AND {})", a.render(), b.render()),
            E::Or(a, b) => format!("({} OR {})", a.render(), b.render()),
            E::Not(a) => format!("(NOT {})", a.render()),
            E::IsNull(a, neg) => {
                format!("({} IS {}NULL)", a.render(), if *neg { "NOT " } else { "" })
            }
            E::InList(a, list, neg) => {
                let items: Vec<String> = list.iter().map(|l| l.to_string()).collect();
                format!(
                    "({} {}IN ({}))",
                    a.render(),
                    if *neg { "NOT " } else { "" },
                    items.join(", ")
                )
            }
            E::Between(a, lo, hi, neg) => format!(
                "({} {}BETWEEN {lo} AND {hi})",
                a.render(),
                if *neg { "NOT " } else { "" }
            ),
            E::Like(a, p, neg) => format!(
                "({} {}LIKE '{p}')",
                a.render(),
                if *neg { "NOT " } else { "" }
            ),
            E::Case(whens, otherwise) => {
                let mut s = "(CASE".to_string();
                for (w, t) in whens {
                    s += &format!(" WHEN {} THEN {}", w.render(), t.render());
                }
                if let Some(o) = otherwise {
                    s += &format!(" ELSE {}", o.render());
                }
                s + " END)"
            }
            E::Coalesce(args) => format!("COALESCE({})", render_list(args)),
            E::Func(name, args) => format!("{name}({})", render_list(args)),
            E::Cast(a, ty) => {
                let t = match ty {
                    Ty::Int => "BIGINT",
                    Ty::Num => "NUMERIC",
                    Ty::Text => "TEXT",
                    Ty::Bool => "BOOLEAN",
                    Ty::Date => "DATE",
                };
                format!("CAST({} AS {t})", a.render())
            }
            E::Concat(a, b) => format!("({} || {})", a.render(), b.render()),
            E::Agg(f, arg, distinct) => {
                let name = match f {
                    AggFn::CountStar => return "count(*)".into(),
                    AggFn::Count => "count",
                    AggFn::Sum => "sum",
                    AggFn::Min => "min",
                    AggFn::Max => "max",
                    AggFn::Avg => "avg",
                };
                format!(
                    "{name}({}{})",
                    if *distinct { "DISTINCT " } else { "" },
                    arg.as_ref().unwrap().render()
                )
            }
        }
    }

    /// Direct children, for simplification.
    fn children(&self) -> Vec<&E> {
        match self {
            E::Col { .. } | E::Lit(..) | E::Param(_) => vec![],
            E::Arith(_, a, b) | E::Cmp(_, a, b) | E::And(a, b) | E::Or(a, b) | E::Concat(a, b) => {
                vec![a, b]
            }
            E::Not(a) | E::IsNull(a, _) | E::InList(a, ..) | E::Between(a, ..) | E::Like(a, ..) => {
                vec![a]
            }
            E::Cast(a, _) => vec![a],
            E::Case(whens, otherwise) => {
                let mut v: Vec<&E> = Vec::new();
                for (w, t) in whens {
                    v.push(w);
                    v.push(t);
                }
                v.extend(otherwise.iter().map(|o| o.as_ref()));
                v
            }
            E::Coalesce(args) | E::Func(_, args) => args.iter().collect(),
            E::Agg(_, arg, _) => arg.iter().map(|a| a.as_ref()).collect(),
        }
    }

    pub fn contains_agg(&self) -> bool {
        matches!(self, E::Agg(..)) || self.children().iter().any(|c| c.contains_agg())
    }

    fn children_mut(&mut self) -> Vec<&mut E> {
        match self {
            E::Col { .. } | E::Lit(..) | E::Param(_) => vec![],
            E::Arith(_, a, b) | E::Cmp(_, a, b) | E::And(a, b) | E::Or(a, b) | E::Concat(a, b) => {
                vec![a, b]
            }
            E::Not(a) | E::IsNull(a, _) | E::InList(a, ..) | E::Between(a, ..) | E::Like(a, ..) => {
                vec![a]
            }
            E::Cast(a, _) => vec![a],
            E::Case(whens, otherwise) => {
                let mut v: Vec<&mut E> = Vec::new();
                for (w, t) in whens {
                    v.push(w);
                    v.push(t);
                }
                v.extend(otherwise.iter_mut().map(|o| o.as_mut()));
                v
            }
            E::Coalesce(args) | E::Func(_, args) => args.iter_mut().collect(),
            E::Agg(_, arg, _) => arg.iter_mut().map(|a| a.as_mut()).collect(),
        }
    }

    /// Simpler expressions of the same type: a sub-expression in its place
    /// (not the argument of an aggregate, which is not valid where the
    /// aggregate is), a shorter IN list, or the same with one part inside
    /// simplified.
    pub fn simpler(&self) -> Vec<E> {
        let mut out: Vec<E> = Vec::new();
        if !matches!(self, E::Agg(..)) {
            let ty = self.ty();
            out.extend(
                self.children()
                    .into_iter()
                    .filter(|c| c.ty() == ty)
                    .cloned(),
            );
        }
        if let E::InList(a, list, neg) = self {
            for i in 0..list.len() {
                if list.len() > 1 {
                    let mut l = list.clone();
                    l.remove(i);
                    out.push(E::InList(a.clone(), l, *neg));
                }
            }
        }
        let n = self.children().len();
        for i in 0..n {
            for alt in self.children()[i].simpler() {
                let mut c = self.clone();
                *c.children_mut()[i] = alt;
                out.push(c);
            }
        }
        out
    }
}

fn render_list(args: &[E]) -> String {
    args.iter()
        .map(|a| a.render())
        .collect::<Vec<_>>()
        .join(", ")
}

fn unify(tys: &[Ty]) -> Ty {
    if tys.contains(&Ty::Num) {
        Ty::Num
    } else {
        tys[0]
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum From {
    Table {
        table: String,
        alias: String,
    },
    Join {
        left: Box<From>,
        right: Box<From>,
        left_join: bool,
        on: Vec<(E, E)>,
    },
    Sub {
        query: Box<Query>,
        alias: String,
        /// Rendered as a `WITH` entry rather than inline.
        cte: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Select {
    pub distinct: bool,
    pub items: Vec<E>,
    pub from: From,
    pub filter: Option<E>,
    pub group_by: Vec<E>,
    pub having: Option<E>,
}

impl Select {
    pub fn grouped(&self) -> bool {
        !self.group_by.is_empty()
            || self.having.is_some()
            || self.items.iter().any(|i| i.contains_agg())
    }

    fn render(&self, ctes: &mut Vec<String>) -> String {
        let items: Vec<String> = self
            .items
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{} AS o{i}", e.render()))
            .collect();
        let mut s = format!(
            "SELECT {}{} FROM {}",
            if self.distinct { "DISTINCT " } else { "" },
            items.join(", "),
            self.from.render(ctes)
        );
        if let Some(f) = &self.filter {
            s += &format!(" WHERE {}", f.render());
        }
        if !self.group_by.is_empty() {
            s += &format!(" GROUP BY {}", render_list(&self.group_by));
        }
        if let Some(h) = &self.having {
            s += &format!(" HAVING {}", h.render());
        }
        s
    }
}

impl From {
    fn render(&self, ctes: &mut Vec<String>) -> String {
        match self {
            From::Table { table, alias } => format!("{table} AS {alias}"),
            From::Join {
                left,
                right,
                left_join,
                on,
            } => {
                let conds: Vec<String> = on
                    .iter()
                    .map(|(l, r)| format!("{} = {}", l.render(), r.render()))
                    .collect();
                format!(
                    "{} {} JOIN {} ON ({})",
                    left.render(ctes),
                    if *left_join { "LEFT" } else { "INNER" },
                    right.render(ctes),
                    conds.join(" AND ")
                )
            }
            From::Sub { query, alias, cte } => {
                let body = query.render_inner(ctes);
                if *cte {
                    ctes.push(format!("{alias} AS ({body})"));
                    alias.clone()
                } else {
                    format!("({body}) AS {alias}")
                }
            }
        }
    }

    /// Base tables in this FROM, with their aliases.
    fn base_aliases(&self, out: &mut Vec<String>) -> bool {
        match self {
            From::Table { alias, .. } => {
                out.push(alias.clone());
                true
            }
            From::Join { left, right, .. } => {
                let l = left.base_aliases(out);
                right.base_aliases(out) && l
            }
            From::Sub { .. } => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Select(Box<Select>),
    /// Left-deep: `left UNION [ALL] right`.
    Union {
        all: bool,
        left: Box<Body>,
        right: Box<Select>,
    },
}

impl Body {
    fn render(&self, ctes: &mut Vec<String>) -> String {
        match self {
            Body::Select(s) => s.render(ctes),
            Body::Union { all, left, right } => format!(
                "{} UNION {}{}",
                left.render(ctes),
                if *all { "ALL " } else { "" },
                right.render(ctes)
            ),
        }
    }

    fn arity(&self) -> usize {
        match self {
            Body::Select(s) => s.items.len(),
            Body::Union { left, .. } => left.arity(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum OrderKey {
    /// An output column, by position (rendered as its alias).
    Item(usize),
    /// An expression over the FROM scope (plain SELECTs only).
    Expr(E),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Order {
    pub key: OrderKey,
    pub desc: bool,
    pub nulls_first: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub body: Body,
    pub order: Vec<Order>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
    /// Output column types.
    pub types: Vec<Ty>,
}

impl Query {
    /// The SQL text, with subqueries marked `cte` hoisted into one WITH.
    pub fn render(&self) -> String {
        let mut ctes = Vec::new();
        let body = self.render_inner(&mut ctes);
        if ctes.is_empty() {
            body
        } else {
            format!("WITH {} {body}", ctes.join(", "))
        }
    }

    fn render_inner(&self, ctes: &mut Vec<String>) -> String {
        let mut s = self.body.render(ctes);
        if !self.order.is_empty() {
            let keys: Vec<String> = self
                .order
                .iter()
                .map(|o| {
                    let k = match &o.key {
                        OrderKey::Item(i) => format!("o{i}"),
                        OrderKey::Expr(e) => e.render(),
                    };
                    format!(
                        "{k} {} NULLS {}",
                        if o.desc { "DESC" } else { "ASC" },
                        if o.nulls_first { "FIRST" } else { "LAST" }
                    )
                })
                .collect();
            s += &format!(" ORDER BY {}", keys.join(", "));
        }
        if let Some(l) = self.limit {
            s += &format!(" LIMIT {l}");
        }
        if let Some(o) = self.offset {
            s += &format!(" OFFSET {o}");
        }
        s
    }

    /// Whether the result as a multiset is the same in every correct
    /// engine: a LIMIT needs an ORDER BY whose ties are only between equal
    /// rows. The generator guarantees this; simplification must keep it.
    fn deterministic(&self) -> bool {
        let here = self.limit.is_none() && self.offset.is_none() || self.total_order();
        let subs = match &self.body {
            Body::Select(s) => from_deterministic(&s.from),
            Body::Union { left, right, .. } => {
                body_deterministic(left) && from_deterministic(&right.from)
            }
        };
        here && subs
    }

    fn total_order(&self) -> bool {
        // All output columns among the keys, or all base-table keys of a
        // plain single SELECT.
        let items: Vec<usize> = self
            .order
            .iter()
            .filter_map(|o| match o.key {
                OrderKey::Item(i) => Some(i),
                _ => None,
            })
            .collect();
        if (0..self.body.arity()).all(|i| items.contains(&i)) {
            return true;
        }
        if let Body::Select(s) = &self.body {
            if s.grouped() || s.distinct {
                return false;
            }
            let mut aliases = Vec::new();
            if !s.from.base_aliases(&mut aliases) {
                return false;
            }
            return aliases.iter().all(|a| {
                self.order.iter().any(|o| match &o.key {
                    OrderKey::Expr(E::Col { qual, name, .. }) => qual == a && name == "id",
                    _ => false,
                })
            });
        }
        false
    }
}

impl Query {
    /// The query with `AND <column> = $1` added to the WHERE of its outermost
    /// SELECT, the column being the `pick`-th one in its FROM scope, and the
    /// parameter's type; `None` for a UNION. A prepared query like this that
    /// direct evaluation cannot answer is served by an automatic view keyed
    /// on the column.
    ///
    /// With `keyable` only queries an automatic view can serve today: no
    /// ORDER BY or LIMIT, and in a grouped SELECT only a group key column.
    pub fn with_param(&self, schema: &Schema, pick: usize, keyable: bool) -> Option<(Query, Ty)> {
        let Body::Select(s) = &self.body else {
            return None;
        };
        if keyable && (!self.order.is_empty() || self.limit.is_some() || self.offset.is_some()) {
            return None;
        }
        fn scope(f: &From, schema: &Schema, out: &mut Vec<E>) {
            match f {
                From::Table { table, alias } => {
                    let t = schema.tables.iter().find(|t| t.name == *table).unwrap();
                    for c in &t.columns {
                        out.push(E::Col {
                            qual: alias.clone(),
                            name: c.name.clone(),
                            ty: c.ty.ty(),
                        });
                    }
                }
                From::Sub { query, alias, .. } => {
                    for (i, ty) in query.types.iter().enumerate() {
                        out.push(E::Col {
                            qual: alias.clone(),
                            name: format!("o{i}"),
                            ty: *ty,
                        });
                    }
                }
                From::Join { left, right, .. } => {
                    scope(left, schema, out);
                    scope(right, schema, out);
                }
            }
        }
        let mut cols = Vec::new();
        scope(&s.from, schema, &mut cols);
        if keyable && s.grouped() {
            cols.retain(|c| s.group_by.contains(c));
            if cols.is_empty() {
                return None;
            }
        }
        let col = cols[pick % cols.len()].clone();
        let ty = col.ty();
        let cond = E::Cmp(Cmp::Eq, Box::new(col), Box::new(E::Param(ty)));
        let mut s = (**s).clone();
        s.filter = Some(match s.filter.take() {
            Some(f) => E::And(Box::new(f), Box::new(cond)),
            None => cond,
        });
        let mut q = self.clone();
        q.body = Body::Select(Box::new(s));
        Some((q, ty))
    }

    /// Whether any SELECT in the query, subqueries included, groups or
    /// aggregates.
    pub fn has_grouping(&self) -> bool {
        fn from(f: &From) -> bool {
            match f {
                From::Table { .. } => false,
                From::Join { left, right, .. } => from(left) || from(right),
                From::Sub { query, .. } => query.has_grouping(),
            }
        }
        fn select(s: &Select) -> bool {
            s.grouped() || from(&s.from)
        }
        fn body(b: &Body) -> bool {
            match b {
                Body::Select(s) => select(s),
                Body::Union { left, right, .. } => body(left) || select(right),
            }
        }
        body(&self.body)
    }

    /// Whether PostgreSQL would accept the query: every column reference
    /// names a FROM item in scope, and grouped SELECTs use columns only
    /// inside aggregates or as group keys. (SQLite is laxer.)
    pub fn valid(&self) -> bool {
        let selects_ok = match &self.body {
            Body::Select(s) => s.valid(),
            Body::Union { left, right, .. } => body_valid(left) && right.valid(),
        };
        let order_ok = self.order.iter().all(|o| match (&o.key, &self.body) {
            (OrderKey::Item(i), _) => *i < self.body.arity(),
            (OrderKey::Expr(e), Body::Select(s)) => {
                let mut aliases = Vec::new();
                s.from.aliases(&mut aliases);
                !s.grouped() && !s.distinct && quals_in(e, &aliases)
            }
            (OrderKey::Expr(_), Body::Union { .. }) => false,
        });
        selects_ok && order_ok && self.deterministic()
    }
}

fn body_valid(b: &Body) -> bool {
    match b {
        Body::Select(s) => s.valid(),
        Body::Union { left, right, .. } => body_valid(left) && right.valid(),
    }
}

/// Every column reference in `e` is qualified by one of `aliases`.
fn quals_in(e: &E, aliases: &[String]) -> bool {
    match e {
        E::Col { qual, .. } => aliases.contains(qual),
        other => other.children().iter().all(|c| quals_in(c, aliases)),
    }
}

/// `e` reads columns only inside aggregates or through whole group keys.
fn grouped_ok(e: &E, keys: &[E]) -> bool {
    if keys.contains(e) {
        return true;
    }
    match e {
        E::Agg(..) => true,
        E::Col { .. } => false,
        other => other.children().iter().all(|c| grouped_ok(c, keys)),
    }
}

impl Select {
    fn valid(&self) -> bool {
        let mut aliases = Vec::new();
        if !self.from.valid(&mut aliases) {
            return false;
        }
        let exprs = self
            .items
            .iter()
            .chain(&self.filter)
            .chain(&self.group_by)
            .chain(&self.having);
        let mut ok = exprs.into_iter().all(|e| quals_in(e, &aliases));
        ok &= self
            .filter
            .iter()
            .chain(&self.group_by)
            .all(|e| !e.contains_agg());
        if self.grouped() {
            ok &= self
                .items
                .iter()
                .chain(&self.having)
                .all(|e| grouped_ok(e, &self.group_by));
        }
        ok
    }
}

impl From {
    /// Aliases this FROM item brings into scope.
    fn aliases(&self, out: &mut Vec<String>) {
        match self {
            From::Table { alias, .. } | From::Sub { alias, .. } => out.push(alias.clone()),
            From::Join { left, right, .. } => {
                left.aliases(out);
                right.aliases(out);
            }
        }
    }

    /// Checks ON conditions and subqueries, collecting aliases.
    fn valid(&self, out: &mut Vec<String>) -> bool {
        match self {
            From::Table { alias, .. } => {
                out.push(alias.clone());
                true
            }
            From::Sub { query, alias, .. } => {
                out.push(alias.clone());
                query.valid()
            }
            From::Join {
                left, right, on, ..
            } => {
                let ok = left.valid(out) && right.valid(out);
                ok && !on.is_empty() && on.iter().all(|(l, r)| quals_in(l, out) && quals_in(r, out))
            }
        }
    }
}

fn body_deterministic(b: &Body) -> bool {
    match b {
        Body::Select(s) => from_deterministic(&s.from),
        Body::Union { left, right, .. } => {
            body_deterministic(left) && from_deterministic(&right.from)
        }
    }
}

fn from_deterministic(f: &From) -> bool {
    match f {
        From::Table { .. } => true,
        From::Join { left, right, .. } => from_deterministic(left) && from_deterministic(right),
        From::Sub { query, .. } => query.deterministic(),
    }
}

// ---------------------------------------------------------------- generation

/// A column visible in a FROM scope.
#[derive(Clone, Debug)]
struct ScopeCol {
    qual: String,
    name: String,
    ty: Ty,
}

impl ScopeCol {
    fn expr(&self) -> E {
        E::Col {
            qual: self.qual.clone(),
            name: self.name.clone(),
            ty: self.ty,
        }
    }
}

/// What the leaves of an expression may be.
enum Leaves<'a> {
    /// Columns of the FROM scope.
    Row(&'a [ScopeCol]),
    /// Group keys and aggregates over the FROM scope.
    Grouped {
        keys: &'a [E],
        scope: &'a [ScopeCol],
    },
}

pub struct Gen<'a> {
    pub rng: &'a mut StdRng,
    pub features: &'a Features,
    pub schema: &'a Schema,
    next_alias: usize,
    /// A query the next one reads as a subquery in FROM, so two views
    /// share a sub-plan.
    pub reuse: Option<Query>,
}

const LIKE_PATTERNS: &[&str] = &["a%", "%b", "_", "a_", "%a%", "ab", "b%", "%"];

impl<'a> Gen<'a> {
    pub fn new(rng: &'a mut StdRng, features: &'a Features, schema: &'a Schema) -> Gen<'a> {
        Gen {
            rng,
            features,
            schema,
            next_alias: 0,
            reuse: None,
        }
    }

    /// One of `choices`, or a date when dates are on.
    fn pick_ty(&mut self, choices: &[Ty]) -> Ty {
        if self.features.dates && self.rng.gen_range(0..=choices.len()) == 0 {
            Ty::Date
        } else {
            *choices.choose(self.rng).unwrap()
        }
    }

    fn p(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn alias(&mut self, prefix: &str) -> String {
        self.next_alias += 1;
        format!("{prefix}{}", self.next_alias - 1)
    }

    /// A new query. Aliases are unique across all queries of one
    /// generator, so a query can be embedded in another.
    pub fn query(&mut self) -> Query {
        self.gen_query(0)
    }

    fn gen_query(&mut self, depth: usize) -> Query {
        let f = self.features;
        let (body, types) = if (f.union || f.union_all) && self.p(0.2) {
            let (first, types) = self.gen_select(depth, None);
            let mut body = Body::Select(Box::new(first));
            let n = if self.p(0.2) { 2 } else { 1 };
            for _ in 0..n {
                let (right, _) = self.gen_select(depth, Some(&types));
                let all = match (f.union, f.union_all) {
                    (true, true) => self.p(0.5),
                    (u, _) => !u,
                };
                body = Body::Union {
                    all,
                    left: Box::new(body),
                    right: Box::new(right),
                };
            }
            (body, types)
        } else {
            let (s, types) = self.gen_select(depth, None);
            (Body::Select(Box::new(s)), types)
        };
        let mut q = Query {
            body,
            order: vec![],
            limit: None,
            offset: None,
            types,
        };
        let union = matches!(q.body, Body::Union { .. });
        if f.order_limit
            && (!union || f.union_order_limit)
            && self.p(if depth == 0 { 0.3 } else { 0.2 })
        {
            self.gen_order(&mut q);
        }
        q
    }

    /// ORDER BY a few output columns in random directions, then a total
    /// tie-break, then LIMIT and maybe OFFSET.
    fn gen_order(&mut self, q: &mut Query) {
        let n = q.types.len();
        let lead = self.rng.gen_range(1..=n.min(2));
        let mut keys: Vec<usize> = (0..n).collect();
        keys.shuffle(self.rng);
        for &i in keys.iter().take(lead) {
            let desc = self.p(0.5);
            let nulls_first = self.p(0.5);
            q.order.push(Order {
                key: OrderKey::Item(i),
                desc,
                nulls_first,
            });
        }
        let mut by_ids = false;
        if let Body::Select(s) = &q.body {
            let mut aliases = Vec::new();
            if self.features.order_by_hidden
                && !s.grouped()
                && !s.distinct
                && s.from.base_aliases(&mut aliases)
                && self.p(0.5)
            {
                by_ids = true;
                for a in aliases {
                    let desc = self.p(0.3);
                    q.order.push(Order {
                        key: OrderKey::Expr(E::Col {
                            qual: a,
                            name: "id".into(),
                            ty: Ty::Int,
                        }),
                        desc,
                        nulls_first: true,
                    });
                }
            }
        }
        if !by_ids {
            for i in 0..n {
                if !keys[..lead].contains(&i) {
                    q.order.push(Order {
                        key: OrderKey::Item(i),
                        desc: false,
                        nulls_first: true,
                    });
                }
            }
        }
        q.limit = Some(self.rng.gen_range(1..=5));
        if self.features.offset && self.p(0.4) {
            q.offset = Some(self.rng.gen_range(1..=3));
        }
    }

    fn gen_select(&mut self, depth: usize, types: Option<&[Ty]>) -> (Select, Vec<Ty>) {
        let f = self.features;
        let (from, scope) = self.gen_from(depth);
        let filter = if self.p(0.6) {
            Some(self.gen_expr(Ty::Bool, 2, &Leaves::Row(&scope)))
        } else {
            None
        };
        let grouped = f.group_by && self.p(0.4);
        let mut group_by = Vec::new();
        let mut having = None;
        let mut items = Vec::new();
        if grouped {
            let nkeys = if f.global_aggregates && self.p(0.2) {
                0
            } else {
                self.rng.gen_range(1..=2)
            };
            for _ in 0..nkeys {
                let c = scope.choose(self.rng).unwrap().expr();
                let key = if f.group_by_exprs && self.p(0.15) && c.ty() == Ty::Int {
                    if f.int_division {
                        E::Arith(
                            Arith::Mod,
                            Box::new(c),
                            Box::new(E::Lit(Lit::Int(3), Ty::Int)),
                        )
                    } else {
                        E::Arith(
                            Arith::Add,
                            Box::new(c),
                            Box::new(E::Lit(Lit::Int(1), Ty::Int)),
                        )
                    }
                } else {
                    c
                };
                if !group_by.contains(&key) {
                    group_by.push(key);
                }
            }
            let leaves = Leaves::Grouped {
                keys: &group_by,
                scope: &scope,
            };
            match types {
                Some(tys) => {
                    for &t in tys {
                        items.push(self.gen_expr(t, 1, &leaves));
                    }
                }
                None => {
                    // The keys (usually), then aggregates.
                    for k in &group_by {
                        if self.p(0.8) {
                            items.push(k.clone());
                        }
                    }
                    let naggs = self.rng.gen_range(1..=3);
                    for _ in 0..naggs {
                        let t = self.pick_ty(&[Ty::Int, Ty::Int, Ty::Num, Ty::Text, Ty::Bool]);
                        let e = if self.p(0.7) {
                            self.gen_agg(t, &scope)
                        } else {
                            None
                        };
                        items.push(e.unwrap_or_else(|| self.gen_expr(t, 1, &leaves)));
                    }
                    if !items.iter().any(|e| e.contains_agg()) {
                        items.push(E::Agg(AggFn::CountStar, None, false));
                    }
                }
            }
            // SQLite refuses HAVING unless the select list or GROUP BY
            // makes the query an aggregate one.
            let aggregate = !group_by.is_empty() || items.iter().any(|e| e.contains_agg());
            if f.having && aggregate && self.p(0.35) {
                having = Some(self.gen_expr(Ty::Bool, 2, &leaves));
            }
        } else {
            match types {
                Some(tys) => {
                    for &t in tys {
                        items.push(self.gen_expr(t, 2, &Leaves::Row(&scope)));
                    }
                }
                None => {
                    let n = self.rng.gen_range(1..=4);
                    for _ in 0..n {
                        let e = if self.p(0.5) {
                            scope.choose(self.rng).unwrap().expr()
                        } else {
                            let t = self.pick_ty(&[Ty::Int, Ty::Num, Ty::Text, Ty::Bool]);
                            self.gen_expr(t, 2, &Leaves::Row(&scope))
                        };
                        items.push(e);
                    }
                }
            }
        }
        let distinct = f.distinct && self.p(0.2);
        let tys: Vec<Ty> = items.iter().map(|e| e.ty()).collect();
        let tys = match types {
            Some(t) => t.to_vec(),
            None => tys,
        };
        (
            Select {
                distinct,
                items,
                from,
                filter,
                group_by,
                having,
            },
            tys,
        )
    }

    fn gen_source(&mut self, depth: usize) -> (From, Vec<ScopeCol>) {
        if depth == 0 {
            if let Some(q) = self.reuse.take() {
                return self.sub_source(q);
            }
        }
        if self.features.subqueries && depth < 2 && self.p(if depth == 0 { 0.2 } else { 0.1 }) {
            let q = self.gen_query(depth + 1);
            return self.sub_source(q);
        }
        let t = self.schema.tables.choose(self.rng).unwrap();
        let alias = self.alias("r");
        let scope = t
            .columns
            .iter()
            .map(|c| ScopeCol {
                qual: alias.clone(),
                name: c.name.clone(),
                ty: c.ty.ty(),
            })
            .collect();
        (
            From::Table {
                table: t.name.clone(),
                alias,
            },
            scope,
        )
    }

    /// `q` as a subquery in FROM (inline or as a WITH entry).
    fn sub_source(&mut self, q: Query) -> (From, Vec<ScopeCol>) {
        let alias = self.alias("s");
        let scope = q
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| ScopeCol {
                qual: alias.clone(),
                name: format!("o{i}"),
                ty: *t,
            })
            .collect();
        let cte = self.features.with_cte && self.p(0.4);
        (
            From::Sub {
                query: Box::new(q),
                alias,
                cte,
            },
            scope,
        )
    }

    fn gen_from(&mut self, depth: usize) -> (From, Vec<ScopeCol>) {
        let (mut from, mut scope) = self.gen_source(depth);
        let f = self.features;
        if !f.joins || !self.p(0.45) {
            return (from, scope);
        }
        let joins = if f.join_chains && self.p(0.3) { 2 } else { 1 };
        for _ in 0..joins {
            let (right, rscope) = self.gen_source(depth);
            // Join-key pairs of compatible types; prefer non-key columns so
            // several rows share a key.
            let mut pairs = Vec::new();
            for l in &scope {
                for r in &rscope {
                    if l.ty.compatible(r.ty) {
                        pairs.push((l.clone(), r.clone()));
                    }
                }
            }
            if pairs.is_empty() {
                continue;
            }
            let non_id: Vec<_> = pairs
                .iter()
                .filter(|(l, r)| l.name != "id" || r.name != "id")
                .cloned()
                .collect();
            let pool = if !non_id.is_empty() && self.p(0.85) {
                non_id
            } else {
                pairs
            };
            let n = if f.multi_column_joins && pool.len() > 1 && self.p(0.3) {
                2
            } else {
                1
            };
            let mut on: Vec<(E, E)> = Vec::new();
            for _ in 0..n {
                let (l, r) = pool.choose(self.rng).unwrap();
                let pair = (l.expr(), r.expr());
                if !on.contains(&pair) {
                    on.push(pair);
                }
            }
            let left_join = f.left_joins && self.p(0.4);
            from = From::Join {
                left: Box::new(from),
                right: Box::new(right),
                left_join,
                on,
            };
            scope.extend(rscope);
        }
        (from, scope)
    }

    /// An aggregate of type `ty` over the scope, if one exists.
    fn gen_agg(&mut self, ty: Ty, scope: &[ScopeCol]) -> Option<E> {
        let f = self.features;
        let row = Leaves::Row(scope);
        match ty {
            Ty::Int => {
                let pick = self.rng.gen_range(0..4);
                Some(match pick {
                    0 => E::Agg(AggFn::CountStar, None, false),
                    1 => {
                        let c = scope.choose(self.rng).unwrap().expr();
                        E::Agg(AggFn::Count, Some(Box::new(c)), false)
                    }
                    2 if f.count_distinct => {
                        let c = scope.choose(self.rng).unwrap().expr();
                        E::Agg(AggFn::Count, Some(Box::new(c)), true)
                    }
                    _ => {
                        let func = *[AggFn::Sum, AggFn::Min, AggFn::Max]
                            .choose(self.rng)
                            .unwrap();
                        let arg = self.gen_expr(Ty::Int, 1, &row);
                        E::Agg(func, Some(Box::new(arg)), false)
                    }
                })
            }
            Ty::Num => {
                let mut funcs = vec![AggFn::Sum, AggFn::Min, AggFn::Max];
                if f.avg {
                    funcs.push(AggFn::Avg);
                }
                let func = *funcs.choose(self.rng).unwrap();
                let arg_ty = if self.p(0.6) { Ty::Num } else { Ty::Int };
                let arg = self.gen_expr(arg_ty, 1, &row);
                let distinct = f.count_distinct && func == AggFn::Sum && self.p(0.15);
                Some(E::Agg(func, Some(Box::new(arg)), distinct))
            }
            Ty::Text | Ty::Date => {
                let func = *[AggFn::Min, AggFn::Max].choose(self.rng).unwrap();
                let arg = self.gen_expr(ty, 1, &row);
                Some(E::Agg(func, Some(Box::new(arg)), false))
            }
            Ty::Bool => None,
        }
    }

    fn leaf(&mut self, ty: Ty, leaves: &Leaves<'_>) -> E {
        match leaves {
            Leaves::Row(scope) => {
                let cols: Vec<&ScopeCol> = scope.iter().filter(|c| c.ty == ty).collect();
                if !cols.is_empty() && self.p(0.85) {
                    return cols.choose(self.rng).unwrap().expr();
                }
                if cols.is_empty() && self.p(0.8) {
                    if let Some(e) = self.converted_leaf(ty, scope) {
                        return e;
                    }
                }
                self.literal(ty)
            }
            Leaves::Grouped { keys, scope } => {
                let ks: Vec<&E> = keys.iter().filter(|k| k.ty() == ty).collect();
                if !ks.is_empty() && self.p(0.5) {
                    return (*ks.choose(self.rng).unwrap()).clone();
                }
                if self.p(0.85) {
                    if let Some(a) = self.gen_agg(ty, scope) {
                        return a;
                    }
                    if ty == Ty::Bool {
                        // A comparison of an aggregate.
                        let a = self.gen_agg(Ty::Int, scope).unwrap();
                        let op = *[Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Gt, Cmp::Ge]
                            .choose(self.rng)
                            .unwrap();
                        let k = self.rng.gen_range(0..=4);
                        return E::Cmp(op, Box::new(a), Box::new(E::Lit(Lit::Int(k), Ty::Int)));
                    }
                }
                self.literal(ty)
            }
        }
    }

    /// A value of type `ty` made from a column of another type, for scopes
    /// without a column of `ty`.
    fn converted_leaf(&mut self, ty: Ty, scope: &[ScopeCol]) -> Option<E> {
        let f = self.features;
        let of = |t: Ty| -> Vec<&ScopeCol> { scope.iter().filter(|c| c.ty == t).collect() };
        match ty {
            Ty::Bool => {
                let c = scope.choose(self.rng)?;
                let op = *[Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Ge]
                    .choose(self.rng)
                    .unwrap();
                let v = self.value_lit(c.ty);
                Some(E::Cmp(op, Box::new(c.expr()), Box::new(E::Lit(v, c.ty))))
            }
            Ty::Num => {
                let c = of(Ty::Int).choose(self.rng).map(|c| c.expr())?;
                Some(E::Arith(
                    Arith::Mul,
                    Box::new(c),
                    Box::new(E::Lit(Lit::Num("0.5".into()), Ty::Num)),
                ))
            }
            Ty::Text if f.cast => {
                let c = of(Ty::Int).choose(self.rng).map(|c| c.expr())?;
                Some(E::Cast(Box::new(c), Ty::Text))
            }
            Ty::Int if f.functions => {
                let c = of(Ty::Text).choose(self.rng).map(|c| c.expr())?;
                Some(E::Func("length", vec![c]))
            }
            _ => None,
        }
    }

    fn literal(&mut self, ty: Ty) -> E {
        let l = match ty {
            Ty::Int => Lit::Int(self.rng.gen_range(-2..=6)),
            // "2.0", not "2": a numeric literal, as the type says (PostgreSQL
            // reads a bare 2 as an integer).
            Ty::Num => Lit::Num(
                ["0.5", "1.25", "2.0", "-0.75", "3.5"]
                    .choose(self.rng)
                    .unwrap()
                    .to_string(),
            ),
            Ty::Text => Lit::Text(
                ["a", "b", "ab", "B", "", "abc"]
                    .choose(self.rng)
                    .unwrap()
                    .to_string(),
            ),
            Ty::Bool => Lit::Bool(self.p(0.5)),
            Ty::Date => Lit::Text(DATES.choose(self.rng).unwrap().to_string()),
        };
        E::Lit(l, ty)
    }

    /// A literal drawn from the values columns hold, for comparisons that hit.
    fn value_lit(&mut self, ty: Ty) -> Lit {
        match ty {
            Ty::Int => Lit::Int(self.rng.gen_range(-3..=9)),
            Ty::Num => Lit::Num(
                ["0", "0.5", "1.25", "2", "-0.75", "3.5", "1"]
                    .choose(self.rng)
                    .unwrap()
                    .to_string(),
            ),
            Ty::Text => Lit::Text(
                ["a", "b", "ab", "ba", "abc", "B", "", "bb"]
                    .choose(self.rng)
                    .unwrap()
                    .to_string(),
            ),
            Ty::Bool => Lit::Bool(self.p(0.5)),
            Ty::Date => Lit::Text(DATES.choose(self.rng).unwrap().to_string()),
        }
    }

    fn rich(&self, leaves: &Leaves<'_>) -> bool {
        matches!(leaves, Leaves::Row(_)) || self.features.rich_grouped_exprs
    }

    fn gen_expr(&mut self, ty: Ty, depth: usize, leaves: &Leaves<'_>) -> E {
        if depth == 0 || self.p(0.35) {
            return self.leaf(ty, leaves);
        }
        let d = depth - 1;
        let rich = self.rich(leaves);
        // Each arm is tried in turn from a random start; an arm whose
        // feature is off yields None.
        let arms = 8;
        let start = self.rng.gen_range(0..arms);
        for k in 0..arms {
            let arm = (start + k) % arms;
            let e = match ty {
                Ty::Int | Ty::Num => self.numeric_arm(ty, arm, d, leaves, rich),
                Ty::Text => self.text_arm(arm, d, leaves, rich),
                Ty::Bool => self.bool_arm(arm, d, leaves, rich),
                Ty::Date => self.date_arm(arm, d, leaves, rich),
            };
            if let Some(e) = e {
                return e;
            }
        }
        self.leaf(ty, leaves)
    }

    fn numeric_arm(
        &mut self,
        ty: Ty,
        arm: usize,
        d: usize,
        leaves: &Leaves<'_>,
        rich: bool,
    ) -> Option<E> {
        let f = self.features;
        Some(match arm {
            0 | 1 => {
                let op = *[Arith::Add, Arith::Sub].choose(self.rng).unwrap();
                let a = self.gen_expr(ty, d, leaves);
                let bt = if ty == Ty::Num && self.p(0.5) {
                    Ty::Int
                } else {
                    ty
                };
                let b = self.gen_expr(bt, d, leaves);
                E::Arith(op, Box::new(a), Box::new(b))
            }
            2 => {
                // Multiply by a small constant only, so nothing overflows.
                let a = self.gen_expr(ty, d, leaves);
                let k = self.rng.gen_range(-2..=3);
                E::Arith(
                    Arith::Mul,
                    Box::new(a),
                    Box::new(E::Lit(Lit::Int(k), Ty::Int)),
                )
            }
            3 if f.int_division && ty == Ty::Int => {
                let op = *[Arith::Div, Arith::Mod].choose(self.rng).unwrap();
                let a = self.gen_expr(Ty::Int, d, leaves);
                let k = self.rng.gen_range(2..=4);
                E::Arith(op, Box::new(a), Box::new(E::Lit(Lit::Int(k), Ty::Int)))
            }
            4 if f.case_expr && rich => {
                let c = self.gen_expr(Ty::Bool, d, leaves);
                let t = self.gen_expr(ty, d, leaves);
                let other = if self.p(0.7) {
                    Some(Box::new(self.gen_expr(ty, d, leaves)))
                } else {
                    None
                };
                E::Case(vec![(c, t)], other)
            }
            5 if f.coalesce => {
                let a = self.gen_expr(ty, d, leaves);
                let b = self.literal(ty);
                E::Coalesce(vec![a, b])
            }
            6 if f.functions => {
                if ty == Ty::Int && self.p(0.5) {
                    let a = self.gen_expr(Ty::Text, d, leaves);
                    E::Func("length", vec![a])
                } else {
                    let a = self.gen_expr(ty, d, leaves);
                    E::Func("abs", vec![a])
                }
            }
            7 if f.cast && rich && ty == Ty::Num => {
                let a = self.gen_expr(Ty::Int, d, leaves);
                E::Cast(Box::new(a), Ty::Num)
            }
            _ => return None,
        })
    }

    fn text_arm(&mut self, arm: usize, d: usize, leaves: &Leaves<'_>, rich: bool) -> Option<E> {
        let f = self.features;
        Some(match arm {
            0 | 1 if f.functions => {
                let name = *["lower", "upper"].choose(self.rng).unwrap();
                let a = self.gen_expr(Ty::Text, d, leaves);
                E::Func(name, vec![a])
            }
            // sqlparser reads substr() as SUBSTRING, which direct
            // evaluation refuses over group keys.
            2 if f.functions && rich => {
                let a = self.gen_expr(Ty::Text, d, leaves);
                let from = self.rng.gen_range(1..=2);
                let len = self.rng.gen_range(1..=2);
                E::Func(
                    "substr",
                    vec![
                        a,
                        E::Lit(Lit::Int(from), Ty::Int),
                        E::Lit(Lit::Int(len), Ty::Int),
                    ],
                )
            }
            3 if f.case_expr && rich => {
                let c = self.gen_expr(Ty::Bool, d, leaves);
                let t = self.gen_expr(Ty::Text, d, leaves);
                let other = if self.p(0.7) {
                    Some(Box::new(self.gen_expr(Ty::Text, d, leaves)))
                } else {
                    None
                };
                E::Case(vec![(c, t)], other)
            }
            4 if f.coalesce => {
                let a = self.gen_expr(Ty::Text, d, leaves);
                E::Coalesce(vec![a, self.literal(Ty::Text)])
            }
            5 if f.cast && rich => {
                let a = self.gen_expr(Ty::Int, d, leaves);
                E::Cast(Box::new(a), Ty::Text)
            }
            6 if f.concat => {
                let a = self.gen_expr(Ty::Text, d, leaves);
                let b = self.gen_expr(Ty::Text, d, leaves);
                E::Concat(Box::new(a), Box::new(b))
            }
            _ => return None,
        })
    }

    fn date_arm(&mut self, arm: usize, d: usize, leaves: &Leaves<'_>, rich: bool) -> Option<E> {
        let f = self.features;
        Some(match arm {
            0 if f.case_expr && rich => {
                let c = self.gen_expr(Ty::Bool, d, leaves);
                let t = self.gen_expr(Ty::Date, d, leaves);
                let other = self.gen_expr(Ty::Date, d, leaves);
                E::Case(vec![(c, t)], Some(Box::new(other)))
            }
            1 if f.coalesce => {
                let a = self.gen_expr(Ty::Date, d, leaves);
                E::Coalesce(vec![a, self.literal(Ty::Date)])
            }
            _ => return None,
        })
    }

    fn bool_arm(&mut self, arm: usize, d: usize, leaves: &Leaves<'_>, rich: bool) -> Option<E> {
        let f = self.features;
        Some(match arm {
            0 | 1 => {
                // A comparison; over rows, usually a column against a value.
                let t = self.pick_ty(&[Ty::Int, Ty::Int, Ty::Num, Ty::Text, Ty::Bool]);
                let op = *[Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge]
                    .choose(self.rng)
                    .unwrap();
                let a = self.gen_expr(t, d, leaves);
                let b = if self.p(0.6) {
                    E::Lit(self.value_lit(t), t)
                } else {
                    let bt = if t.numeric() && self.p(0.3) {
                        Ty::Num
                    } else {
                        t
                    };
                    self.gen_expr(bt, d, leaves)
                };
                E::Cmp(op, Box::new(a), Box::new(b))
            }
            2 => {
                let a = self.gen_expr(Ty::Bool, d, leaves);
                let b = self.gen_expr(Ty::Bool, d, leaves);
                if self.p(0.5) {
                    E::And(Box::new(a), Box::new(b))
                } else {
                    E::Or(Box::new(a), Box::new(b))
                }
            }
            3 if rich => {
                let a = self.gen_expr(Ty::Bool, d, leaves);
                E::Not(Box::new(a))
            }
            4 if rich => {
                let t = self.pick_ty(&[Ty::Int, Ty::Num, Ty::Text, Ty::Bool]);
                let a = self.gen_expr(t, d, leaves);
                E::IsNull(Box::new(a), self.p(0.5))
            }
            5 if f.in_list && rich => {
                let t = self.pick_ty(&[Ty::Int, Ty::Num, Ty::Text]);
                let a = self.gen_expr(t, d, leaves);
                let n = self.rng.gen_range(1..=3);
                let mut list: Vec<Lit> = (0..n).map(|_| self.value_lit(t)).collect();
                if self.p(0.2) {
                    list.push(Lit::Null);
                }
                E::InList(Box::new(a), list, self.p(0.3))
            }
            6 if f.between && rich => {
                let t = self.pick_ty(&[Ty::Int, Ty::Num, Ty::Text]);
                let a = self.gen_expr(t, d, leaves);
                let (x, y) = (self.value_lit(t), self.value_lit(t));
                E::Between(Box::new(a), x, y, self.p(0.3))
            }
            7 if f.like && rich => {
                let a = self.gen_expr(Ty::Text, d, leaves);
                let p = LIKE_PATTERNS.choose(self.rng).unwrap().to_string();
                E::Like(Box::new(a), p, self.p(0.3))
            }
            _ => return None,
        })
    }
}

// ------------------------------------------------------------ simplification

/// Queries one step simpler than `q`, each still deterministic. The runner
/// keeps one only if it fails the same way, so candidates need not be valid.
pub fn simplify(q: &Query) -> Vec<Query> {
    let mut out = Vec::new();
    let push = |c: Query, out: &mut Vec<Query>| {
        if c.valid() && c != *q {
            out.push(c);
        }
    };
    // Union: keep one branch.
    if let Body::Union { left, right, .. } = &q.body {
        let mut c = q.clone();
        c.body = (**left).clone();
        push(c, &mut out);
        let mut c = q.clone();
        c.body = Body::Select(right.clone());
        push(c, &mut out);
        // UNION to UNION ALL (one way only, or minimising would go round).
        let mut c = q.clone();
        if let Body::Union { all, .. } = &mut c.body {
            *all = true;
        }
        push(c, &mut out);
    }
    // ORDER BY / LIMIT / OFFSET.
    if q.offset.is_some() {
        let mut c = q.clone();
        c.offset = None;
        push(c, &mut out);
    }
    if q.limit.is_some() {
        let mut c = q.clone();
        c.limit = None;
        c.offset = None;
        c.order.clear();
        push(c, &mut out);
        if q.limit != Some(1) {
            let mut c = q.clone();
            c.limit = Some(1);
            push(c, &mut out);
        }
    }
    if !q.order.is_empty() {
        let mut c = q.clone();
        c.order.clear();
        push(c, &mut out);
        for i in 0..q.order.len() {
            let mut c = q.clone();
            c.order.remove(i);
            push(c, &mut out);
        }
    }
    // Drop an output column (in every branch), renumbering ORDER BY.
    let arity = q.types.len();
    if arity > 1 {
        for i in 0..arity {
            let mut c = q.clone();
            c.types.remove(i);
            remove_item(&mut c.body, i);
            c.order.retain(|o| o.key != OrderKey::Item(i));
            for o in &mut c.order {
                if let OrderKey::Item(j) = &mut o.key {
                    if *j > i {
                        *j -= 1;
                    }
                }
            }
            push(c, &mut out);
        }
    }
    // Per-SELECT simplifications, in every SELECT of the body.
    let nsel = count_selects(&q.body);
    for si in 0..nsel {
        let sel = nth_select(&q.body, si).clone();
        for s in simplify_select(&sel) {
            let mut c = q.clone();
            *nth_select_mut(&mut c.body, si) = s;
            push(c, &mut out);
        }
    }
    out
}

fn remove_item(b: &mut Body, i: usize) {
    match b {
        Body::Select(s) => {
            s.items.remove(i);
        }
        Body::Union { left, right, .. } => {
            remove_item(left, i);
            right.items.remove(i);
        }
    }
}

fn count_selects(b: &Body) -> usize {
    match b {
        Body::Select(_) => 1,
        Body::Union { left, .. } => count_selects(left) + 1,
    }
}

fn nth_select(b: &Body, n: usize) -> &Select {
    match b {
        Body::Select(s) => s,
        Body::Union { left, right, .. } => {
            if n == count_selects(left) {
                right
            } else {
                nth_select(left, n)
            }
        }
    }
}

fn nth_select_mut(b: &mut Body, n: usize) -> &mut Select {
    match b {
        Body::Select(s) => s,
        Body::Union { left, right, .. } => {
            if n == count_selects(left) {
                right
            } else {
                nth_select_mut(left, n)
            }
        }
    }
}

fn simplify_select(s: &Select) -> Vec<Select> {
    let mut out = Vec::new();
    if s.distinct {
        let mut c = s.clone();
        c.distinct = false;
        out.push(c);
    }
    if let Some(f) = &s.filter {
        let mut c = s.clone();
        c.filter = None;
        out.push(c);
        for g in f.simpler() {
            let mut c = s.clone();
            c.filter = Some(g);
            out.push(c);
        }
    }
    if let Some(h) = &s.having {
        let mut c = s.clone();
        c.having = None;
        out.push(c);
        for g in h.simpler() {
            let mut c = s.clone();
            c.having = Some(g);
            out.push(c);
        }
    }
    for i in 0..s.group_by.len() {
        let mut c = s.clone();
        c.group_by.remove(i);
        out.push(c);
    }
    for i in 0..s.items.len() {
        for g in s.items[i].simpler() {
            let mut c = s.clone();
            c.items[i] = g;
            out.push(c);
        }
    }
    for f in simplify_from(&s.from) {
        let mut c = s.clone();
        c.from = f;
        out.push(c);
    }
    out
}

fn simplify_from(f: &From) -> Vec<From> {
    let mut out = Vec::new();
    match f {
        From::Table { .. } => {}
        From::Join {
            left,
            right,
            left_join,
            on,
        } => {
            out.push((**left).clone());
            if *left_join {
                out.push(From::Join {
                    left: left.clone(),
                    right: right.clone(),
                    left_join: false,
                    on: on.clone(),
                });
            }
            if on.len() > 1 {
                for i in 0..on.len() {
                    let mut on = on.clone();
                    on.remove(i);
                    out.push(From::Join {
                        left: left.clone(),
                        right: right.clone(),
                        left_join: *left_join,
                        on,
                    });
                }
            }
            for l in simplify_from(left) {
                out.push(From::Join {
                    left: Box::new(l),
                    right: right.clone(),
                    left_join: *left_join,
                    on: on.clone(),
                });
            }
            for r in simplify_from(right) {
                out.push(From::Join {
                    left: left.clone(),
                    right: Box::new(r),
                    left_join: *left_join,
                    on: on.clone(),
                });
            }
        }
        From::Sub { query, alias, cte } => {
            if *cte {
                out.push(From::Sub {
                    query: query.clone(),
                    alias: alias.clone(),
                    cte: false,
                });
            }
            // Keep the subquery's output columns: only simplifications that
            // preserve arity.
            for q in simplify(query) {
                if q.types.len() == query.types.len() {
                    out.push(From::Sub {
                        query: Box::new(q),
                        alias: alias.clone(),
                        cte: *cte,
                    });
                }
            }
        }
    }
    out
}
