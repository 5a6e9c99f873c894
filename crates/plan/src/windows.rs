//! Window functions in a SELECT (part of the binder): each call in the
//! select list or ORDER BY, `f(...) OVER (PARTITION BY ... ORDER BY ...)`,
//! is taken out of its expression and replaced by a reference to a column
//! of its own, which the dataflow's window operator adds after WHERE,
//! GROUP BY and HAVING (`crates/dataflow/src/ops/window.rs`). The
//! arguments and the window are bound over the rows it sees.

use std::ops::ControlFlow;

use aqueduct_dataflow::ops::{FrameEnd, WindowCall, WindowFunc, WindowOrder};
use aqueduct_expr::agg::AggFunc;
use aqueduct_expr::{Expr, SqlError};
use aqueduct_values::DataType;
use sqlparser::ast;

use crate::bind::{contains_window, object_name, window_placeholder, Binder};
use crate::plan::WindowItem;

/// Named windows may refer to named windows; a chain longer than this is
/// refused (a cycle would otherwise never end).
const MAX_WINDOW_CHAIN: usize = 64;

/// Binds an expression over the rows window functions see, with its type.
pub(crate) type BindOver<'x, 'a> =
    dyn FnMut(&mut Binder<'a>, &ast::Expr) -> Result<(Expr, DataType), SqlError> + 'x;

fn nested() -> SqlError {
    SqlError::new("42P20", "window function calls cannot be nested")
}

/// Replaces each window function call of an expression (outside
/// subqueries, which have their own) by its placeholder column, noting the
/// calls; equal calls share one column.
struct TakeCalls<'c> {
    calls: &'c mut Vec<ast::Function>,
    depth: usize,
}

impl ast::VisitorMut for TakeCalls<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _q: &mut ast::Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _q: &mut ast::Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        if let ast::Expr::Function(f) = e {
            if f.over.is_some() {
                let i = match self.calls.iter().position(|c| c == f) {
                    Some(i) => i,
                    None => {
                        self.calls.push(f.clone());
                        self.calls.len() - 1
                    }
                };
                *e = window_placeholder(i);
            }
        }
        ControlFlow::Continue(())
    }
}

impl<'a> Binder<'a> {
    /// Takes the window function calls out of `e` (see [`TakeCalls`]).
    pub(crate) fn take_window_calls(&self, e: &mut ast::Expr, calls: &mut Vec<ast::Function>) {
        use sqlparser::ast::VisitMut;
        let _ = e.visit(&mut TakeCalls { calls, depth: 0 });
    }

    /// Binds one window function call, its arguments and its window with
    /// `bind`; `named` are the query's `WINDOW name AS (...)` definitions.
    pub(crate) fn window_item(
        &mut self,
        f: &ast::Function,
        named: &[ast::NamedWindowDefinition],
        bind: &mut BindOver<'_, 'a>,
    ) -> Result<(WindowItem, DataType), SqlError> {
        let name = object_name(&f.name)?;
        let name = name
            .strip_prefix("pg_catalog.")
            .unwrap_or(&name)
            .to_string();
        let (args, star) = window_args(f, &name)?;
        let func = match (WindowFunc::by_name(&name), AggFunc::by_name(&name)) {
            (Some(w), _) => w,
            (None, Some(AggFunc::Count)) if star => WindowFunc::Aggregate(AggFunc::CountStar),
            (None, Some(a)) if !a.collects() || a == AggFunc::ArrayAgg => WindowFunc::Aggregate(a),
            (None, Some(_)) => {
                return Err(SqlError::unsupported(format!(
                    "{name}() as a window function"
                )))
            }
            (None, None) => {
                return Err(SqlError::new(
                    "42809",
                    format!(
                    "OVER specified, but {name} is not a window function nor an aggregate function"
                ),
                ))
            }
        };
        if star && func != WindowFunc::Aggregate(AggFunc::CountStar) {
            return Err(SqlError::new(
                "42883",
                format!("function {name}(*) does not exist"),
            ));
        }
        let (min, max) = func.arity();
        if !(min..=max).contains(&args.len()) {
            return Err(SqlError::new(
                "42883",
                format!(
                    "function {name} with {} arguments does not exist",
                    args.len()
                ),
            )
            .with_hint(format!("{name} takes {min} to {max} arguments")));
        }
        if args.iter().any(contains_window) {
            return Err(nested());
        }
        let mut bound = Vec::new();
        let mut types = Vec::new();
        for a in &args {
            let (x, ty) = bind(self, a)?;
            bound.push(x);
            types.push(ty);
        }
        let ty = match func {
            WindowFunc::RowNumber | WindowFunc::Rank | WindowFunc::DenseRank => DataType::Int8,
            WindowFunc::Ntile => DataType::Int4,
            WindowFunc::PercentRank | WindowFunc::CumeDist => DataType::Float8,
            WindowFunc::Lag
            | WindowFunc::Lead
            | WindowFunc::FirstValue
            | WindowFunc::LastValue
            | WindowFunc::NthValue => types[0].unconstrained(),
            WindowFunc::Aggregate(AggFunc::CountStar) => DataType::Int8,
            WindowFunc::Aggregate(a) => a.result_type(&types[0]),
        };
        let over = f.over.as_ref().expect("a window function call has OVER");
        let spec = resolve(over, named)?;
        let mut partition = Vec::new();
        for p in &spec.partition_by {
            if contains_window(p) {
                return Err(nested());
            }
            partition.push(bind(self, p)?.0);
        }
        let mut order = Vec::new();
        for o in &spec.order_by {
            if contains_window(&o.expr) {
                return Err(nested());
            }
            let descending = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
            order.push(WindowOrder {
                expr: bind(self, &o.expr)?.0,
                descending,
                nulls_first: o.options.nulls_first.unwrap_or(descending),
            });
        }
        let frame = match &spec.window_frame {
            None => FrameEnd::Peers,
            Some(frame) => frame_end(frame)?,
        };
        Ok((
            WindowItem {
                partition,
                order,
                frame,
                call: WindowCall { func, args: bound },
            },
            ty,
        ))
    }
}

/// A call's arguments, and whether it is `f(*)`; what a window function
/// does not take (DISTINCT, ORDER BY or FILTER inside, IGNORE NULLS) is
/// refused.
fn window_args(f: &ast::Function, name: &str) -> Result<(Vec<ast::Expr>, bool), SqlError> {
    if f.filter.is_some() {
        return Err(SqlError::unsupported(format!(
            "FILTER in the window function {name}()"
        )));
    }
    if f.null_treatment.is_some() {
        return Err(SqlError::unsupported("IGNORE NULLS / RESPECT NULLS"));
    }
    if !f.within_group.is_empty() {
        return Err(SqlError::new(
            "42809",
            format!("WITHIN GROUP is not allowed with {name}() OVER"),
        ));
    }
    match &f.args {
        ast::FunctionArguments::None => Ok((Vec::new(), false)),
        ast::FunctionArguments::Subquery(_) => Err(SqlError::unsupported("subqueries")),
        ast::FunctionArguments::List(list) => {
            if matches!(
                list.duplicate_treatment,
                Some(ast::DuplicateTreatment::Distinct)
            ) {
                return Err(SqlError::new(
                    "0A000",
                    "DISTINCT is not implemented for window functions",
                ));
            }
            if !list.clauses.is_empty() {
                return Err(SqlError::new(
                    "0A000",
                    "aggregate ORDER BY is not implemented for window functions",
                ));
            }
            let mut out = Vec::new();
            let mut star = false;
            for a in &list.args {
                match a {
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => out.push(e.clone()),
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => star = true,
                    other => return Err(SqlError::unsupported(format!("the argument {other}"))),
                }
            }
            Ok((out, star))
        }
    }
}

/// The window a call's `OVER` names or writes, with a named window it
/// builds on (`OVER w`, `OVER (w ORDER BY x)`) filled in as PostgreSQL
/// copies one: its PARTITION BY, and its ORDER BY unless the call has one.
fn resolve(
    over: &ast::WindowType,
    named: &[ast::NamedWindowDefinition],
) -> Result<ast::WindowSpec, SqlError> {
    let mut spec = match over {
        ast::WindowType::WindowSpec(s) => s.clone(),
        ast::WindowType::NamedWindow(n) => ast::WindowSpec {
            window_name: Some(n.clone()),
            partition_by: vec![],
            order_by: vec![],
            window_frame: None,
        },
    };
    let mut steps = 0;
    while let Some(base_name) = spec.window_name.take() {
        steps += 1;
        if steps > MAX_WINDOW_CHAIN {
            return Err(SqlError::new(
                "42P20",
                format!(
                    "window \"{base_name}\" refers to windows more than {MAX_WINDOW_CHAIN} deep"
                ),
            ));
        }
        let wanted = crate::bind::ident(&base_name);
        let base = named
            .iter()
            .find(|d| crate::bind::ident(&d.0) == wanted)
            .ok_or_else(|| SqlError::new("42704", format!("window \"{wanted}\" does not exist")))?;
        let base = match &base.1 {
            ast::NamedWindowExpr::WindowSpec(s) => s.clone(),
            ast::NamedWindowExpr::NamedWindow(n) => ast::WindowSpec {
                window_name: Some(n.clone()),
                partition_by: vec![],
                order_by: vec![],
                window_frame: None,
            },
        };
        if !spec.partition_by.is_empty() {
            return Err(SqlError::new(
                "42P20",
                format!("cannot override PARTITION BY clause of window \"{wanted}\""),
            ));
        }
        if !spec.order_by.is_empty() && !base.order_by.is_empty() {
            return Err(SqlError::new(
                "42P20",
                format!("cannot override ORDER BY clause of window \"{wanted}\""),
            ));
        }
        if base.window_frame.is_some() {
            return Err(SqlError::new(
                "42P20",
                format!("cannot copy window \"{wanted}\" because it has a frame clause"),
            ));
        }
        spec.partition_by = base.partition_by;
        if spec.order_by.is_empty() {
            spec.order_by = base.order_by;
        }
        spec.window_name = base.window_name;
    }
    Ok(spec)
}

/// Where an explicit frame ends, for the frames that start at the start
/// of the partition; any other frame is refused, named.
fn frame_end(frame: &ast::WindowFrame) -> Result<FrameEnd, SqlError> {
    use ast::WindowFrameBound as B;
    let text = match &frame.end_bound {
        Some(end) => format!("{} BETWEEN {} AND {end}", frame.units, frame.start_bound),
        None => format!("{} {}", frame.units, frame.start_bound),
    };
    let refused = || {
        SqlError::new("0A000", format!("the window frame {text} is not supported")).with_hint(
            "frames from UNBOUNDED PRECEDING to CURRENT ROW or to UNBOUNDED FOLLOWING are",
        )
    };
    if !matches!(frame.start_bound, B::Preceding(None)) {
        return Err(refused());
    }
    match (&frame.units, &frame.end_bound) {
        (ast::WindowFrameUnits::Rows, None | Some(B::CurrentRow)) => Ok(FrameEnd::Row),
        (_, None | Some(B::CurrentRow)) => Ok(FrameEnd::Peers),
        (_, Some(B::Following(None))) => Ok(FrameEnd::Partition),
        _ => Err(refused()),
    }
}
