//! Behaviour beyond the paper's examples: views, commutativity, read-only
//! chains, errors, renderings, and random and very large workloads checked
//! against a naive reference.

mod common;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use aqueduct_chains::{
    analyze, AnalysisError, Chain, EdgeKind, Hop, InstanceRule, Report, Verdict, Workload,
};
use common::{assert_consistent, distributed, witness_paths, Rng};

// ---------------------------------------------------------------------
// Views and commutativity
// ---------------------------------------------------------------------

/// A reader of two views and a writer of their two base tables: each
/// hop of one conflicts with a hop of the other only through a view.
fn view_workload(reader_reads: [&str; 2]) -> Workload {
    Workload::new()
        .view("V", ["T"])
        .view("W", ["U"])
        .chain(
            Chain::new("reader")
                .hop(Hop::new().reads([reader_reads[0]]))
                .hop(Hop::new().reads([reader_reads[1]])),
        )
        .chain(
            Chain::new("writer")
                .hop(Hop::new().writes(["T"]).commutes_with_self())
                .hop(Hop::new().writes(["U"]).commutes_with_self()),
        )
}

#[test]
fn a_view_read_against_a_base_write_creates_a_cycle() {
    let report = analyze(&view_workload(["V", "W"])).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["reader", "writer"]);
    let path = &witness_paths(&report, "reader")[0];
    assert!(
        path == "reader#1.hop1 -S- reader#1.hop2 -C- writer#1.hop2 -S- writer#1.hop1 -C- reader#1.hop1"
            || path
                == "reader#1.hop1 -S- reader#1.hop2 -C- writer#2.hop2 -S- writer#2.hop1 -C- reader#1.hop1",
        "{path}"
    );
    let text = report.explain_chain("reader").unwrap();
    assert!(
        text.contains("view V read by one, its base table T written by the other"),
        "{text}"
    );
}

#[test]
fn views_of_unrelated_tables_do_not_conflict() {
    let mut workload = view_workload(["V", "W"]).view("Other", ["Elsewhere"]);
    workload.chains[0] = Chain::new("reader")
        .hop(Hop::new().reads(["Other"]))
        .hop(Hop::new().reads(["Elsewhere2"]));
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
    assert!(report.graph.edges.iter().all(|e| e.kind == EdgeKind::S));
}

#[test]
fn views_over_views_resolve_to_their_base_tables() {
    let workload = Workload::new()
        .view("Join", ["T", "Other"])
        .view("Index", ["Join"])
        .view("W", ["U"])
        .chain(
            Chain::new("reader")
                .hop(Hop::new().reads(["Index"]))
                .hop(Hop::new().reads(["W"])),
        )
        .chain(
            Chain::new("writer")
                .hop(Hop::new().writes(["T"]).commutes_with_self())
                .hop(Hop::new().writes(["U"]).commutes_with_self()),
        );
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["reader", "writer"]);
}

#[test]
fn two_view_reads_never_conflict() {
    let workload = Workload::new()
        .view("V", ["T"])
        .chain(
            Chain::new("a")
                .hop(Hop::new().reads(["V"]))
                .hop(Hop::new().reads(["V", "T"])),
        )
        .chain(
            Chain::new("b")
                .hop(Hop::new().reads(["V"]))
                .hop(Hop::new().reads(["T"])),
        );
    let report = analyze(&workload).unwrap();
    assert!(report.graph.edges.iter().all(|e| e.kind == EdgeKind::S));
    assert!(distributed(&report).is_empty());
}

#[test]
fn a_pairwise_commutativity_annotation_removes_a_cycle() {
    // Two transfers touching the same two tables in opposite orders close
    // a cycle, unless the hops that meet on one table commute.
    let base = || {
        Workload::new()
            .chain(
                Chain::new("credit_then_debit")
                    .hop(Hop::new().writes(["Credits"]).commutes_with_self())
                    .hop(Hop::new().writes(["Debits"]).commutes_with_self()),
            )
            .chain(
                Chain::new("debit_then_credit")
                    .hop(Hop::new().writes(["Debits"]).commutes_with_self())
                    .hop(Hop::new().writes(["Credits"]).commutes_with_self()),
            )
    };
    let report = analyze(&base()).unwrap();
    assert_consistent(&report);
    assert_eq!(
        distributed(&report),
        ["credit_then_debit", "debit_then_credit"]
    );
    assert_eq!(
        witness_paths(&report, "credit_then_debit")[0],
        "credit_then_debit#1.hop1 -S- credit_then_debit#1.hop2 -C- debit_then_credit#1.hop1 \
         -S- debit_then_credit#1.hop2 -C- credit_then_debit#1.hop1"
    );

    // The annotation is an unordered pair: either order works.
    for annotated in [
        base().commute(("credit_then_debit", 0), ("debit_then_credit", 1)),
        base().commute(("debit_then_credit", 1), ("credit_then_debit", 0)),
    ] {
        let report = analyze(&annotated).unwrap();
        assert_consistent(&report);
        assert!(distributed(&report).is_empty());
    }

    // An annotation on hops that meet on no table changes nothing.
    let unrelated = base().commute(("credit_then_debit", 0), ("debit_then_credit", 0));
    let report = analyze(&unrelated).unwrap();
    assert_eq!(distributed(&report).len(), 2);
}

#[test]
fn a_pair_of_a_hop_with_itself_means_self_commuting() {
    let chain = Chain::new("bid")
        .hop(Hop::new().writes(["Bids"]))
        .hop(Hop::new().writes(["Items"]));
    let report = analyze(&Workload::new().chain(chain.clone())).unwrap();
    assert_eq!(distributed(&report), ["bid"]);
    let annotated = Workload::new().chain(chain).commute(("bid", 0), ("bid", 0));
    let report = analyze(&annotated).unwrap();
    assert!(distributed(&report).is_empty());
}

// ---------------------------------------------------------------------
// Read-only chains
// ---------------------------------------------------------------------

#[test]
fn read_only_chains_appear_once_and_never_conflict_with_each_other() {
    let workload = Workload::new()
        .chain(
            Chain::new("browse")
                .hop(Hop::new().reads(["Items", "Bids"]))
                .hop(Hop::new().reads(["Users"])),
        )
        .chain(
            Chain::new("search")
                .hop(Hop::new().reads(["Users"]))
                .hop(Hop::new().reads(["Items"])),
        );
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    for chain in &report.chains {
        assert!(!chain.updating);
        assert_eq!(chain.instances, 1);
        assert_eq!(chain.verdict, Verdict::Piecewise);
    }
    assert_eq!(report.graph.nodes.len(), 4);
    assert_eq!(report.graph.edges.len(), 2);
}

#[test]
fn a_read_only_chain_can_still_need_a_distributed_transaction() {
    // The reader looks at the two tables the writer updates, in two hops
    // of its own; the writer's hops commute with themselves, and the
    // reader has a single instance.
    let workload = Workload::new()
        .chain(
            Chain::new("reader")
                .hop(Hop::new().reads(["A"]))
                .hop(Hop::new().reads(["B"])),
        )
        .chain(
            Chain::new("writer")
                .hop(Hop::new().writes(["A"]).commutes_with_self())
                .hop(Hop::new().writes(["B"]).commutes_with_self()),
        );
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["reader", "writer"]);
    assert_eq!(report.chain("reader").unwrap().instances, 1);
}

#[test]
fn single_hop_chains_are_always_piecewise() {
    let workload = Workload::new()
        .chain(Chain::new("a").hop(Hop::new().reads(["T"]).writes(["T"])))
        .chain(Chain::new("b").hop(Hop::new().writes(["T"])))
        .chain(Chain::new("c").hop(Hop::new().reads(["T"])));
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
    assert!(report.graph.edges.iter().any(|e| e.kind == EdgeKind::C));
    let text = report.explain_chain("a").unwrap();
    assert!(
        text.contains("piecewise (a single hop has no S-edge)"),
        "{text}"
    );
}

// ---------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------

#[test]
fn invalid_workloads_are_refused() {
    let one_hop = |name: &str| Chain::new(name).hop(Hop::new().writes(["T"]));
    let cases: Vec<(Workload, AnalysisError)> = vec![
        (
            Workload::new().chain(Chain::new("empty")),
            AnalysisError::EmptyChain {
                chain: "empty".into(),
            },
        ),
        (
            Workload::new().chain(one_hop("x")).chain(one_hop("x")),
            AnalysisError::DuplicateChain { chain: "x".into() },
        ),
        (
            Workload::new().chain(Chain::new("x").hop(Hop::named("h")).hop(Hop::named("h"))),
            AnalysisError::DuplicateHop {
                chain: "x".into(),
                hop: "h".into(),
            },
        ),
        (
            Workload::new().view("V", ["T"]).view("V", ["U"]),
            AnalysisError::DuplicateView { view: "V".into() },
        ),
        (
            Workload::new().view("V", ["W"]).view("W", ["T", "V"]),
            AnalysisError::ViewCycle { view: "V".into() },
        ),
        (
            Workload::new().view("V", ["V"]),
            AnalysisError::ViewCycle { view: "V".into() },
        ),
        (
            Workload::new()
                .view("V", ["T"])
                .chain(Chain::new("x").hop(Hop::new().writes(["V"]))),
            AnalysisError::WriteToView {
                chain: "x".into(),
                hop: "hop1".into(),
                view: "V".into(),
            },
        ),
        (
            Workload::new()
                .chain(one_hop("x"))
                .commute(("x", 0), ("y", 0)),
            AnalysisError::UnknownChain { chain: "y".into() },
        ),
        (
            Workload::new()
                .chain(one_hop("x"))
                .commute(("x", 0), ("x", 1)),
            AnalysisError::UnknownHop {
                chain: "x".into(),
                hop: 1,
            },
        ),
    ];
    for (workload, expected) in cases {
        let error = analyze(&workload).unwrap_err();
        assert_eq!(error, expected);
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn oversized_graphs_are_refused() {
    // Every hop writes the same table: C-edges grow with the square.
    let mut workload = Workload::new();
    for index in 0..1_100 {
        workload = workload.chain(Chain::new(format!("c{index}")).hop(Hop::new().writes(["Hot"])));
    }
    match analyze(&workload) {
        Err(AnalysisError::TooManyEdges { limit }) => {
            assert_eq!(limit, aqueduct_chains::MAX_GRAPH_EDGES)
        }
        other => panic!("expected TooManyEdges, got {other:?}"),
    }
    let huge = Chain {
        name: "huge".into(),
        hops: vec![Hop::new().writes(["T"]); aqueduct_chains::MAX_GRAPH_NODES],
    };
    match analyze(&Workload::new().chain(huge)) {
        Err(AnalysisError::TooManyNodes { nodes, .. }) => {
            assert_eq!(nodes, 2 * aqueduct_chains::MAX_GRAPH_NODES)
        }
        other => panic!("expected TooManyNodes, got {other:?}"),
    }
}

// ---------------------------------------------------------------------
// Renderings
// ---------------------------------------------------------------------

fn auction() -> Workload {
    Workload::new()
        .view("Bids_by_item", ["Bids"])
        .chain(
            Chain::new("bid")
                .hop(Hop::named("insert_bid").writes(["Bids"]))
                .hop(
                    Hop::named("update_price")
                        .reads(["Items"])
                        .writes(["Items"]),
                ),
        )
        .chain(Chain::new("add").hop(Hop::new().writes(["Items"])))
        .chain(Chain::new("history \"by\" item").hop(Hop::new().reads(["Bids_by_item"])))
}

/// Checks DOT text: balanced braces outside strings, one declaration per
/// node, every edge between declared nodes. Returns (nodes, edges, red
/// edges).
fn check_dot(dot: &str) -> (usize, usize, usize) {
    assert!(dot.starts_with("graph sc_graph {\n"), "{dot}");
    assert!(dot.ends_with("}\n"), "{dot}");
    let mut depth = 0i64;
    let mut in_string = false;
    let mut escaped = false;
    for character in dot.chars() {
        if in_string {
            match character {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match character {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                assert!(depth >= 0, "closing brace without opening");
            }
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced braces");
    assert!(!in_string, "unterminated string");

    let mut declared = HashSet::new();
    let mut edges = 0;
    let mut red = 0;
    for line in dot.lines().map(str::trim) {
        if let Some((left, _)) = line.split_once(" -- ") {
            let right = line
                .split(" -- ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap();
            assert!(declared.contains(left), "edge from undeclared {left}");
            assert!(declared.contains(right), "edge to undeclared {right}");
            assert!(line.ends_with("];"));
            assert!(line.contains("style=solid") || line.contains("style=dashed"));
            edges += 1;
            if line.contains("color=red") {
                red += 1;
            }
        } else if line.starts_with('n') && line.contains(" [label=") {
            let id = line.split_whitespace().next().unwrap().to_string();
            assert!(declared.insert(id), "node declared twice");
        }
    }
    (declared.len(), edges, red)
}

#[test]
fn dot_output_is_well_formed_and_highlights_witnesses() {
    let report = analyze(&auction()).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["bid"]);
    let dot = report.to_dot();
    let (nodes, edges, red) = check_dot(&dot);
    assert_eq!(nodes, report.graph.nodes.len());
    assert_eq!(edges, report.graph.edges.len());
    let witness_edges: HashSet<_> = report
        .chains
        .iter()
        .flat_map(|chain| chain.witnesses.iter())
        .flat_map(|cycle| cycle.edges.iter().copied())
        .collect();
    assert!(!witness_edges.is_empty());
    assert_eq!(red, witness_edges.len());
    assert!(dot.contains("\\\"by\\\""), "names are escaped: {dot}");
    // S-edges solid, C-edges dashed.
    let solid = dot.matches("style=solid").count();
    let s_edges = report
        .graph
        .edges
        .iter()
        .filter(|edge| edge.kind == EdgeKind::S)
        .count();
    assert_eq!(solid, s_edges);

    let only_add = report.to_dot_for_chain("add").unwrap();
    let (_, _, red) = check_dot(&only_add);
    assert_eq!(red, 0);
    assert!(report.to_dot_for_chain("missing").is_none());
}

#[test]
fn explain_lists_hops_verdict_and_cycles() {
    let report = analyze(&auction()).unwrap();
    let text = report.explain_chain("bid").unwrap();
    assert!(
        text.starts_with("chain bid: 2 hops, updating, 2 instances in the SC-graph\n"),
        "{text}"
    );
    assert!(text.contains("  1. insert_bid: writes Bids\n"), "{text}");
    assert!(
        text.contains("  2. update_price: reads Items; writes Items\n"),
        "{text}"
    );
    assert!(
        text.contains("verdict: distributed transaction (2 of its 2 S-edges lie on SC-cycles)"),
        "{text}"
    );
    assert!(
        text.contains("  1. bid#1.insert_bid -S- bid#1.update_price -C- bid#2.update_price -S- bid#2.insert_bid -C- bid#1.insert_bid\n"),
        "{text}"
    );
    assert!(
        text.contains("bid#1.update_price -C- bid#2.update_price: both write Items"),
        "{text}"
    );
    assert!(report.explain_chain("missing").is_none());
    let all = report.explain();
    assert!(all.contains("chain add:") && all.contains("chain history \"by\" item:"));
}

// ---------------------------------------------------------------------
// Random workloads against a naive reference
// ---------------------------------------------------------------------

type Triple = (usize, usize, usize); // chain, instance, hop

fn random_workload(rng: &mut Rng, chains: usize, max_hops: usize, tables: usize) -> Workload {
    let table = |index: usize| format!("t{index}");
    let mut workload = Workload::new();
    let views = tables / 4;
    for view in 0..views {
        let mut sources: Vec<String> = (0..1 + rng.below(2))
            .map(|_| table(rng.below(tables)))
            .collect();
        if view > 0 && rng.chance(30) {
            sources.push(format!("v{}", rng.below(view)));
        }
        workload = workload.view(format!("v{view}"), sources);
    }
    for index in 0..chains {
        let mut chain = Chain::new(format!("c{index}"));
        for _ in 0..1 + rng.below(max_hops) {
            let mut hop = Hop::new();
            for _ in 0..rng.below(3) {
                if views > 0 && rng.chance(30) {
                    hop = hop.reads([format!("v{}", rng.below(views))]);
                } else {
                    hop = hop.reads([table(rng.below(tables))]);
                }
            }
            if rng.chance(45) {
                hop = hop.writes([table(rng.below(tables))]);
            }
            if rng.chance(20) {
                hop = hop.commutes_with_self();
            }
            chain = chain.hop(hop);
        }
        workload = workload.chain(chain);
    }
    for _ in 0..chains / 3 {
        let a = rng.below(chains);
        let b = rng.below(chains);
        let hop_a = rng.below(workload.chains[a].hops.len());
        let hop_b = rng.below(workload.chains[b].hops.len());
        workload = workload.commute((format!("c{a}"), hop_a), (format!("c{b}"), hop_b));
    }
    workload
}

/// The SC-graph computed pair by pair, straight from the definitions.
fn reference_edges(workload: &Workload) -> BTreeSet<(Triple, Triple, EdgeKind)> {
    // Views to base tables by iterating to a fixed point.
    let mut bases: HashMap<&str, BTreeSet<String>> = workload
        .views
        .iter()
        .map(|view| (view.name.as_str(), view.sources.clone()))
        .collect();
    loop {
        let mut changed = false;
        let snapshot = bases.clone();
        for set in bases.values_mut() {
            let expanded: BTreeSet<String> = set
                .iter()
                .flat_map(|name| match snapshot.get(name.as_str()) {
                    Some(inner) => inner.iter().cloned().collect::<Vec<_>>(),
                    None => vec![name.clone()],
                })
                .collect();
            if expanded != *set {
                *set = expanded;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let accesses = |hop: &Hop| -> (BTreeSet<String>, BTreeSet<String>) {
        let mut read = BTreeSet::new();
        for name in &hop.reads {
            match bases.get(name.as_str()) {
                Some(set) => read.extend(set.iter().cloned()),
                None => {
                    read.insert(name.clone());
                }
            }
        }
        (read, hop.writes.clone())
    };
    let commuting: HashSet<((String, usize), (String, usize))> = workload
        .commuting
        .iter()
        .flat_map(|(a, b)| {
            let a = (a.chain.clone(), a.hop);
            let b = (b.chain.clone(), b.hop);
            [(a.clone(), b.clone()), (b, a)]
        })
        .collect();

    let mut nodes: Vec<Triple> = Vec::new();
    for (c, chain) in workload.chains.iter().enumerate() {
        let instances = match workload.instance_rule {
            InstanceRule::TwoPerUpdatingChain if chain.is_updating() => 2,
            _ => 1,
        };
        for instance in 1..=instances {
            for hop in 0..chain.hops.len() {
                nodes.push((c, instance, hop));
            }
        }
    }
    let mut edges = BTreeSet::new();
    for (i, &x) in nodes.iter().enumerate() {
        for &y in &nodes[i + 1..] {
            let (hx, hy) = (
                &workload.chains[x.0].hops[x.2],
                &workload.chains[y.0].hops[y.2],
            );
            if x.0 == y.0 && x.1 == y.1 {
                if x.2 + 1 == y.2 {
                    edges.insert((x, y, EdgeKind::S));
                }
                continue;
            }
            let (rx, wx) = accesses(hx);
            let (ry, wy) = accesses(hy);
            let conflict = wx.iter().any(|t| wy.contains(t) || ry.contains(t))
                || wy.iter().any(|t| rx.contains(t));
            let key_x = (workload.chains[x.0].name.clone(), x.2);
            let key_y = (workload.chains[y.0].name.clone(), y.2);
            let annotated = commuting.contains(&(key_x.clone(), key_y.clone()))
                || (key_x == key_y && hx.commutes_with_self);
            if conflict && !annotated {
                edges.insert((x, y, EdgeKind::C));
            }
        }
    }
    edges
}

fn graph_edges(report: &Report) -> BTreeSet<(Triple, Triple, EdgeKind)> {
    let triple = |id: aqueduct_chains::NodeId| {
        let node = &report.graph.nodes[id.index()];
        (node.chain, node.instance, node.hop)
    };
    report
        .graph
        .edges
        .iter()
        .map(|edge| {
            let (a, b) = (triple(edge.a), triple(edge.b));
            (a.min(b), a.max(b), edge.kind)
        })
        .collect()
}

/// Chains with an S-edge that is not a bridge, found by deleting each
/// S-edge in turn and searching for another path between its ends.
fn reference_distributed(report: &Report) -> Vec<String> {
    let mut adjacency: Vec<Vec<(usize, usize)>> = vec![Vec::new(); report.graph.nodes.len()];
    for (index, edge) in report.graph.edges.iter().enumerate() {
        adjacency[edge.a.index()].push((edge.b.index(), index));
        adjacency[edge.b.index()].push((edge.a.index(), index));
    }
    let mut flagged = BTreeSet::new();
    for (index, edge) in report.graph.edges.iter().enumerate() {
        if edge.kind != EdgeKind::S {
            continue;
        }
        let (from, to) = (edge.a.index(), edge.b.index());
        let mut seen = vec![false; adjacency.len()];
        let mut queue = VecDeque::from([from]);
        seen[from] = true;
        let mut reached = false;
        while let Some(node) = queue.pop_front() {
            if node == to {
                reached = true;
                break;
            }
            for &(next, via) in &adjacency[node] {
                if via != index && !seen[next] {
                    seen[next] = true;
                    queue.push_back(next);
                }
            }
        }
        if reached {
            flagged.insert(report.graph.nodes[from].chain);
        }
    }
    flagged
        .into_iter()
        .map(|chain| report.chains[chain].name.clone())
        .collect()
}

fn check_against_reference(workload: &Workload) -> Report {
    let report = analyze(workload).unwrap();
    assert_consistent(&report);
    assert_eq!(graph_edges(&report), reference_edges(workload));
    let ours: Vec<String> = distributed(&report).into_iter().map(String::from).collect();
    assert_eq!(ours, reference_distributed(&report));
    report
}

#[test]
fn random_small_workloads_match_the_reference() {
    let mut rng = Rng::new(0x5eed_cafe);
    let mut distributed_seen = 0;
    let mut piecewise_multi_hop_seen = 0;
    for round in 0..300 {
        let chains = 1 + rng.below(6);
        let tables = 3 + rng.below(5);
        let mut workload = random_workload(&mut rng, chains, 4, tables);
        if round % 2 == 1 {
            workload = workload.instance_rule(InstanceRule::OnePerChain);
        }
        let report = check_against_reference(&workload);
        distributed_seen += report.distributed_chains().count();
        piecewise_multi_hop_seen += report
            .piecewise_chains()
            .filter(|chain| chain.hops.len() > 1)
            .count();
    }
    // The generator exercises both outcomes.
    assert!(distributed_seen > 10, "{distributed_seen}");
    assert!(piecewise_multi_hop_seen > 10, "{piecewise_multi_hop_seen}");
}

#[test]
fn three_hundred_hops_finish_quickly() {
    let mut rng = Rng::new(42);
    let mut workload = random_workload(&mut rng, 100, 5, 60);
    // Top the workload up to at least 300 hops.
    let mut extra = 0;
    while workload.chains.iter().map(|c| c.hops.len()).sum::<usize>() < 300 {
        workload = workload.chain(
            Chain::new(format!("extra{extra}"))
                .hop(Hop::new().reads([format!("t{}", rng.below(60))]))
                .hop(Hop::new().writes([format!("t{}", rng.below(60))])),
        );
        extra += 1;
    }
    let hops: usize = workload.chains.iter().map(|c| c.hops.len()).sum();
    assert!(hops >= 300);

    let started = Instant::now();
    let report = analyze(&workload).unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert!(report.graph.nodes.len() > hops);
    assert_consistent(&report);
    // Rendering stays cheap too.
    assert!(!report.explain().is_empty());
    check_dot(&report.to_dot());

    // And the result agrees with the naive reference.
    assert_eq!(graph_edges(&report), reference_edges(&workload));
    let ours: Vec<String> = distributed(&report).into_iter().map(String::from).collect();
    assert_eq!(ours, reference_distributed(&report));
}

/// A chain of 20,000 hops whose first and last hops conflict with one
/// writer: the search depth and the witness are 20,000 long. Run on a
/// thread with a small stack, which a recursive search would overflow.
#[test]
fn very_deep_graphs_need_no_deep_stack() {
    let worker = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            const HOPS: usize = 20_000;
            let mut long = Chain::new("long");
            for index in 0..HOPS {
                let table = if index == 0 || index == HOPS - 1 {
                    "Hot".to_string()
                } else {
                    format!("t{index}")
                };
                long = long.hop(Hop::new().reads([table]));
            }
            let workload = Workload::new()
                .chain(long)
                .chain(Chain::new("writer").hop(Hop::new().writes(["Hot"])));
            let report = analyze(&workload).unwrap();
            let long = report.chain("long").unwrap();
            assert_eq!(long.verdict, Verdict::Distributed);
            assert_eq!(long.cyclic_s_edges, HOPS - 1);
            // One witness passes through every S-edge: no other is needed.
            assert_eq!(long.witnesses.len(), 1);
            let cycle = &long.witnesses[0];
            assert_eq!(cycle.len(), HOPS + 1);
            assert_eq!(cycle.count(&report.graph, EdgeKind::S), HOPS - 1);
            assert_eq!(cycle.count(&report.graph, EdgeKind::C), 2);
        })
        .unwrap();
    worker.join().unwrap();
}
