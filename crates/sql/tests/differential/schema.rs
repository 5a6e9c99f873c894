//! Random schemas and rows, and the literals both engines read the same way.

use std::fmt;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

/// A column's declared type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColType {
    Integer,
    BigInt,
    Text,
    Boolean,
    Numeric,
    /// Stored by SQLite as ISO text, which orders like the dates.
    Date,
}

impl ColType {
    pub fn sql(self) -> &'static str {
        match self {
            ColType::Integer => "integer",
            ColType::BigInt => "bigint",
            ColType::Text => "text",
            ColType::Boolean => "boolean",
            ColType::Numeric => "numeric",
            ColType::Date => "date",
        }
    }

    pub fn ty(self) -> Ty {
        match self {
            ColType::Integer | ColType::BigInt => Ty::Int,
            ColType::Numeric => Ty::Num,
            ColType::Text => Ty::Text,
            ColType::Boolean => Ty::Bool,
            ColType::Date => Ty::Date,
        }
    }

    /// Every value a column of this type may hold (before NULL). Numerics
    /// are multiples of 1/4 so SQLite's floating point sums them exactly;
    /// integers stay small so no product or sum overflows in either engine.
    pub fn universe(self) -> Vec<Lit> {
        match self {
            ColType::Integer => (-3..=9).map(Lit::Int).collect(),
            ColType::BigInt => [-1, 0, 1, 2, 3, 7, 100_000, 250_000]
                .into_iter()
                .map(Lit::Int)
                .collect(),
            ColType::Numeric => ["0", "0.5", "1.25", "2", "-0.75", "3.5", "10", "1"]
                .into_iter()
                .map(|s| Lit::Num(s.to_string()))
                .collect(),
            ColType::Text => ["a", "b", "ab", "ba", "abc", "B", "", "bb"]
                .into_iter()
                .map(|s| Lit::Text(s.to_string()))
                .collect(),
            ColType::Boolean => vec![Lit::Bool(false), Lit::Bool(true)],
            ColType::Date => DATES.iter().map(|s| Lit::Text(s.to_string())).collect(),
        }
    }
}

/// The dates a date column holds (and date literals use).
pub const DATES: &[&str] = &[
    "2024-01-01",
    "2024-01-02",
    "2024-02-29",
    "2023-12-31",
    "2024-01-10",
];

/// The type of an expression, as far as the generator cares: integers of
/// any width are one type, numerics another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ty {
    Int,
    Num,
    Text,
    Bool,
    Date,
}

impl Ty {
    /// Types that compare with each other and unify in CASE, COALESCE and UNION.
    pub fn compatible(self, other: Ty) -> bool {
        self.numeric() && other.numeric() || self == other
    }

    pub fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Num)
    }
}

/// A literal, rendered identically for SQLite and Aqueduct.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Null,
    Int(i64),
    /// Decimal text.
    Num(String),
    Text(String),
    Bool(bool),
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lit::Null => write!(f, "NULL"),
            Lit::Int(i) if *i < 0 => write!(f, "({i})"),
            Lit::Int(i) => write!(f, "{i}"),
            Lit::Num(s) if s.starts_with('-') => write!(f, "({s})"),
            Lit::Num(s) => write!(f, "{s}"),
            Lit::Text(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Lit::Bool(true) => write!(f, "TRUE"),
            Lit::Bool(false) => write!(f, "FALSE"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Column {
    pub name: String,
    pub ty: ColType,
    pub nullable: bool,
    /// The values this column draws from: a small domain so joins, groups
    /// and DISTINCT collide.
    pub domain: Vec<Lit>,
}

impl Column {
    /// A column of a random type (date only if `dates`) with a random
    /// domain; nullable more often than not.
    pub fn random(rng: &mut StdRng, name: &str, dates: bool) -> Column {
        let types = [
            ColType::Integer,
            ColType::Integer,
            ColType::BigInt,
            ColType::Text,
            ColType::Text,
            ColType::Boolean,
            ColType::Numeric,
            ColType::Date,
        ];
        let types = if dates {
            &types[..]
        } else {
            &types[..types.len() - 1]
        };
        let ty = *types.choose(rng).unwrap();
        let mut universe = ty.universe();
        universe.shuffle(rng);
        let size = rng.gen_range(2..=universe.len());
        universe.truncate(size);
        Column {
            name: name.to_string(),
            ty,
            nullable: rng.gen_bool(0.7),
            domain: universe,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Table {
    pub name: String,
    /// `columns[0]` is the integer primary key `id`.
    pub columns: Vec<Column>,
}

impl Table {
    pub fn create_sql(&self) -> String {
        let cols: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{} {} PRIMARY KEY", c.name, c.ty.sql())
                } else if c.nullable {
                    format!("{} {}", c.name, c.ty.sql())
                } else {
                    format!("{} {} NOT NULL", c.name, c.ty.sql())
                }
            })
            .collect();
        format!("CREATE TABLE {} ({})", self.name, cols.join(", "))
    }

    pub fn random_value(&self, rng: &mut StdRng, col: usize) -> Lit {
        let c = &self.columns[col];
        if c.nullable && rng.gen_bool(0.15) {
            Lit::Null
        } else {
            c.domain.choose(rng).unwrap().clone()
        }
    }

    /// A full row (without the id).
    pub fn random_row(&self, rng: &mut StdRng, id: i64) -> Vec<Lit> {
        let mut row = vec![Lit::Int(id)];
        for c in 1..self.columns.len() {
            row.push(self.random_value(rng, c));
        }
        row
    }
}

#[derive(Clone, Debug)]
pub struct Schema {
    pub tables: Vec<Table>,
}

impl Schema {
    /// `dates`: whether columns may be of type date.
    pub fn random(rng: &mut StdRng, dates: bool) -> Schema {
        let n = rng.gen_range(2..=3);
        let names = ["ta", "tb", "tc"];
        let col_names = ["a", "b", "c", "d"];
        let mut tables = Vec::new();
        for name in names.iter().take(n) {
            let id_ty = if rng.gen_bool(0.7) {
                ColType::Integer
            } else {
                ColType::BigInt
            };
            let mut columns = vec![Column {
                name: "id".into(),
                ty: id_ty,
                nullable: false,
                domain: vec![],
            }];
            let ncols = rng.gen_range(2..=4);
            for cname in col_names.iter().take(ncols) {
                columns.push(Column::random(rng, cname, dates));
            }
            tables.push(Table {
                name: name.to_string(),
                columns,
            });
        }
        Schema { tables }
    }
}

impl Lit {
    /// The literal as a column's `DEFAULT`: SQLite's `ADD COLUMN` takes a
    /// signed number but no expression in parentheses.
    pub fn default_sql(&self) -> String {
        match self {
            Lit::Int(i) => i.to_string(),
            Lit::Num(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// Renders rows as one `INSERT` statement naming its columns.
pub fn insert_named_sql(table: &str, columns: &[String], rows: &[Vec<Lit>]) -> String {
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            let vals: Vec<String> = r.iter().map(|v| v.to_string()).collect();
            format!("({})", vals.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO {table} ({}) VALUES {}",
        columns.join(", "),
        values.join(", ")
    )
}

/// Renders rows as one `INSERT` statement.
pub fn insert_sql(table: &str, rows: &[Vec<Lit>]) -> String {
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            let vals: Vec<String> = r.iter().map(|v| v.to_string()).collect();
            format!("({})", vals.join(", "))
        })
        .collect();
    format!("INSERT INTO {table} VALUES {}", values.join(", "))
}
