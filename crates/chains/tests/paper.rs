//! The examples of the Lynx paper (SOSP 2013), encoded as workloads, with
//! the verdicts the paper states.

mod common;

use aqueduct_chains::{analyze, Chain, EdgeKind, Hop, InstanceRule, Workload};
use common::{assert_consistent, chains_on_cycle, distributed, witness_paths};

// ---------------------------------------------------------------------
// Figure 2: transaction chopping. T1 = [T11, T12], T2 = [T21, T22], T3
// unchopped. In (a) the conflicts are T11~T21, T22~T3 and T3~T12 (the
// ones footnote 2 uses for its bad interleaving), which close an SC-cycle;
// in (b) T3 no longer conflicts with T12 and there is none. Each
// transaction runs once: the classical chopping setting.
// ---------------------------------------------------------------------

fn figure_2(t3_reads: &[&str]) -> Workload {
    Workload::new()
        .chain(
            Chain::new("T1")
                .hop(Hop::named("T11").writes(["A"]))
                .hop(Hop::named("T12").writes(["C"])),
        )
        .chain(
            Chain::new("T2")
                .hop(Hop::named("T21").reads(["A"]))
                .hop(Hop::named("T22").writes(["B"])),
        )
        .chain(Chain::new("T3").hop(Hop::named("T3").reads(t3_reads.iter().copied())))
}

#[test]
fn figure_2a_has_an_sc_cycle() {
    let workload = figure_2(&["B", "C"]).instance_rule(InstanceRule::OnePerChain);
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["T1", "T2"]);
    assert_eq!(report.is_piecewise("T3"), Some(true));
    assert_eq!(
        witness_paths(&report, "T1"),
        ["T1#1.T11 -S- T1#1.T12 -C- T3#1.T3 -C- T2#1.T22 -S- T2#1.T21 -C- T1#1.T11"]
    );
}

#[test]
fn figure_2b_has_no_sc_cycle() {
    let workload = figure_2(&["B"]).instance_rule(InstanceRule::OnePerChain);
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
    assert_eq!(report.piecewise_chains().count(), 3);
}

/// Figure 2(b) is safe only if each transaction runs once. Under Lynx'
/// rule, where any chain may run concurrently with itself, T1 conflicts
/// with its own second instance, and the two instances of T2 (both
/// writing B) close a cycle through T1 (which writes the A they read).
#[test]
fn figure_2b_with_two_instances_per_updating_chain() {
    let report = analyze(&figure_2(&["B"])).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["T1", "T2"]);
    let t2 = report.chain("T2").unwrap();
    assert_eq!(t2.instances, 2);
    assert_eq!(
        witness_paths(&report, "T2")[0],
        "T2#1.T21 -S- T2#1.T22 -C- T2#2.T22 -S- T2#2.T21 -C- T1#1.T11 -C- T2#1.T21"
    );
    assert_eq!(
        witness_paths(&report, "T1")[0],
        "T1#1.T11 -S- T1#1.T12 -C- T1#2.T12 -S- T1#2.T11 -C- T1#1.T11"
    );
}

// ---------------------------------------------------------------------
// Figure 3 (§4.1) and the annotations of §4.2 / Figure 7: the auction
// service with T_bid = [insert into Bids, update the price in Items],
// T_add (one hop inserting into Items) and T_read (one hop reading Items).
// ---------------------------------------------------------------------

fn auction(insert_commutes: bool, update_commutes: bool) -> Workload {
    let mut insert_bid = Hop::named("insert_bid").writes(["Bids"]);
    if insert_commutes {
        insert_bid = insert_bid.commutes_with_self();
    }
    let mut update_price = Hop::named("update_price")
        .reads(["Items"])
        .writes(["Items"]);
    if update_commutes {
        update_price = update_price.commutes_with_self();
    }
    Workload::new()
        .chain(Chain::new("bid").hop(insert_bid).hop(update_price))
        .chain(Chain::new("add").hop(Hop::named("insert_item").writes(["Items"])))
        .chain(Chain::new("read").hop(Hop::named("read_item").reads(["Items"])))
}

#[test]
fn figure_3_bid_has_an_sc_cycle_over_its_two_instances() {
    let report = analyze(&auction(false, false)).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["bid"]);
    assert_eq!(report.is_piecewise("add"), Some(true));
    assert_eq!(report.is_piecewise("read"), Some(true));

    let bid = report.chain("bid").unwrap();
    assert_eq!(bid.instances, 2);
    assert_eq!(report.chain("add").unwrap().instances, 2);
    assert_eq!(report.chain("read").unwrap().instances, 1);
    assert_eq!(bid.cyclic_s_edges, 2);
    assert_eq!(
        witness_paths(&report, "bid"),
        ["bid#1.insert_bid -S- bid#1.update_price -C- bid#2.update_price -S- bid#2.insert_bid -C- bid#1.insert_bid"]
    );
    // Two instances of bid (two hops each) and of add, one of read.
    assert_eq!(report.graph.nodes.len(), 7);
}

#[test]
fn figure_3_self_commuting_insert_breaks_the_cycle() {
    // §4.2: inserting a bid with a unique id commutes with itself.
    let report = analyze(&auction(true, false)).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
}

#[test]
fn figure_7_annotations_make_place_bid_piecewise() {
    let report = analyze(&auction(true, true)).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
    // The update still conflicts with adding and reading items.
    let c_edges = report
        .graph
        .edges
        .iter()
        .filter(|edge| edge.kind == EdgeKind::C)
        .count();
    assert!(c_edges > 0);
}

// ---------------------------------------------------------------------
// Figure 4 (§4.2): a one-hop user chain writes base table X, which has
// derived tables X' and X''. Combined with the system sub-chains that
// maintain them, it has an SC-cycle on its two instances; the complete
// construction leaves the sub-chains out and the chain runs piecewise.
// ---------------------------------------------------------------------

#[test]
fn figure_4_combined_with_its_system_chains_has_an_sc_cycle() {
    let combined = Chain::new("update_x")
        .hop(Hop::named("x").writes(["X"]))
        .hop(Hop::named("x_prime").writes(["X'"]))
        .hop(Hop::named("x_double_prime").writes(["X''"]));
    let report = analyze(&Workload::new().chain(combined)).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["update_x"]);
    let witness = &report.chain("update_x").unwrap().witnesses[0];
    let on_cycle = chains_on_cycle(&report, witness);
    assert!(on_cycle.iter().all(|chain| *chain == "update_x"));
}

#[test]
fn figure_4_complete_construction_runs_piecewise() {
    let workload = Workload::new()
        .view("X'", ["X"])
        .view("X''", ["X"])
        .chain(Chain::new("update_x").hop(Hop::named("x").writes(["X"])))
        .chain(Chain::new("read_x_prime").hop(Hop::new().reads(["X'"])))
        .chain(Chain::new("read_x_double_prime").hop(Hop::new().reads(["X''"])));
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
}

// ---------------------------------------------------------------------
// §8, first paragraph: a user chain reading a base table and a table
// derived from it has an SC-cycle; reading only the derived table (with
// the needed columns copied into it) removes it.
// ---------------------------------------------------------------------

#[test]
fn section_8_reading_a_base_table_and_its_derived_table_has_an_sc_cycle() {
    let workload = Workload::new()
        .view("Bids_by_item", ["Bids"])
        .chain(Chain::new("bid").hop(Hop::new().writes(["Bids"]).commutes_with_self()))
        .chain(
            Chain::new("history")
                .hop(Hop::named("read_bid").reads(["Bids"]))
                .hop(Hop::named("read_index").reads(["Bids_by_item"])),
        );
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["history"]);
    let history = report.chain("history").unwrap();
    assert!(!history.updating);
    assert_eq!(history.instances, 1);
    let path = &witness_paths(&report, "history")[0];
    assert!(
        path == "history#1.read_bid -S- history#1.read_index -C- bid#1.hop1 -C- history#1.read_bid"
            || path
                == "history#1.read_bid -S- history#1.read_index -C- bid#2.hop1 -C- history#1.read_bid",
        "{path}"
    );

    let fixed = Workload::new()
        .view("Bids_by_item", ["Bids"])
        .chain(Chain::new("bid").hop(Hop::new().writes(["Bids"]).commutes_with_self()))
        .chain(Chain::new("history").hop(Hop::new().reads(["Bids_by_item"])));
    let report = analyze(&fixed).unwrap();
    assert!(distributed(&report).is_empty());
}

// ---------------------------------------------------------------------
// §8, L-Social: base tables Graph, Status, Users, Wall, Activities; the
// join table GraphActivities and its secondary index.
// ---------------------------------------------------------------------

fn social_views(workload: Workload) -> Workload {
    workload
        .view("GraphActivities", ["Graph", "Activities"])
        .view("GraphActivities_by_user", ["GraphActivities"])
}

fn edge_hop(name: &str) -> Hop {
    Hop::named(name).reads(["Graph"]).writes(["Graph"])
}

fn read_activities() -> Chain {
    Chain::new("read_activities").hop(Hop::named("feed").reads(["GraphActivities_by_user"]))
}

#[test]
fn l_social_naive_befriend_has_an_sc_cycle_through_the_activity_read() {
    let befriend = Chain::new("befriend")
        .hop(Hop::named("edge_a").writes(["Graph"]))
        .hop(Hop::named("edge_b").writes(["Graph"]))
        .hop(Hop::named("activity_a").writes(["Activities"]))
        .hop(Hop::named("activity_b").writes(["Activities"]));
    let workload = social_views(Workload::new())
        .chain(befriend)
        .chain(read_activities());
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["befriend"]);
    // The view read conflicts with the Graph insertions: some witness runs
    // through the read hop.
    let befriend = report.chain("befriend").unwrap();
    assert!(befriend
        .witnesses
        .iter()
        .any(|cycle| chains_on_cycle(&report, cycle).contains(&"read_activities")));
}

fn linked_befriend_chains(workload: Workload) -> Workload {
    workload
        .chain(
            Chain::new("befriend")
                .hop(edge_hop("edge_a"))
                .hop(edge_hop("edge_b")),
        )
        .chain(
            Chain::new("unfriend")
                .hop(edge_hop("edge_a"))
                .hop(edge_hop("edge_b")),
        )
        .chain(Chain::new("announce_a").hop(Hop::new().writes(["Activities"])))
        .chain(Chain::new("announce_b").hop(Hop::new().writes(["Activities"])))
}

/// Edges kept as counters: inserting and deleting friendship edges all
/// commute with each other.
fn counter_annotations(mut workload: Workload) -> Workload {
    let hops: [(&str, usize); 4] = [
        ("befriend", 0),
        ("befriend", 1),
        ("unfriend", 0),
        ("unfriend", 1),
    ];
    for (i, a) in hops.iter().enumerate() {
        for b in &hops[i..] {
            workload = workload.commute(*a, *b);
        }
    }
    workload
}

#[test]
fn l_social_linked_befriend_still_cycles_with_unfriend_and_itself() {
    let report = analyze(&linked_befriend_chains(Workload::new())).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["befriend", "unfriend"]);
    for cycle in &report.chain("befriend").unwrap().witnesses {
        let on_cycle = chains_on_cycle(&report, cycle);
        assert!(on_cycle
            .iter()
            .all(|c| *c == "befriend" || *c == "unfriend"));
    }
}

#[test]
fn l_social_self_commutativity_alone_is_not_enough() {
    // Each hop commuting with itself leaves befriend#1.edge_a against
    // befriend#2.edge_b: the pairwise annotations are needed.
    let mut workload = linked_befriend_chains(Workload::new());
    for chain in &mut workload.chains {
        for hop in &mut chain.hops {
            hop.commutes_with_self = true;
        }
    }
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["befriend", "unfriend"]);
}

#[test]
fn l_social_counter_commutativity_removes_the_cycle() {
    let workload = counter_annotations(linked_befriend_chains(Workload::new()));
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
}

fn l_social_final() -> Workload {
    let workload = social_views(Workload::new());
    let workload = counter_annotations(linked_befriend_chains(workload));
    workload
        .chain(
            Chain::new("post_status")
                .hop(
                    Hop::named("insert_status")
                        .writes(["Status"])
                        .commutes_with_self(),
                )
                .hop(
                    Hop::named("announce")
                        .writes(["Activities"])
                        .commutes_with_self(),
                ),
        )
        .chain(
            Chain::new("post_wall")
                .hop(
                    Hop::named("insert_wall")
                        .writes(["Wall"])
                        .commutes_with_self(),
                )
                .hop(
                    Hop::named("announce")
                        .writes(["Activities"])
                        .commutes_with_self(),
                ),
        )
        .chain(read_activities())
        .chain(Chain::new("read_friends").hop(Hop::named("list").reads(["Graph"])))
}

#[test]
fn l_social_final_analysis_reports_the_read_against_befriend_cycle() {
    let report = analyze(&l_social_final()).unwrap();
    assert_consistent(&report);
    // The paper's final analysis: the one-hop read chain has C-edges to
    // both hops of befriend (or unfriend). Everything else is piecewise.
    assert_eq!(distributed(&report), ["befriend", "unfriend"]);
    for name in ["befriend", "unfriend"] {
        let chain = report.chain(name).unwrap();
        let shortest = &chain.witnesses[0];
        assert_eq!(shortest.len(), 3, "{}", report.cycle_path(shortest));
        assert_eq!(shortest.count(&report.graph, EdgeKind::S), 1);
        assert_eq!(shortest.count(&report.graph, EdgeKind::C), 2);
        let on_cycle = chains_on_cycle(&report, shortest);
        assert!(
            on_cycle.contains(&"read_friends") || on_cycle.contains(&"read_activities"),
            "{on_cycle:?}"
        );
    }
    let text = report.explain_chain("befriend").unwrap();
    assert!(text.contains("verdict: distributed transaction"), "{text}");
    assert!(text.contains("-S-") && text.contains("-C-"), "{text}");
    let text = report.explain_chain("post_status").unwrap();
    assert!(text.contains("verdict: piecewise"), "{text}");
}

// ---------------------------------------------------------------------
// §8, L-RUBiS: registering a user with a unique name, and the bids of
// Figure 7.
// ---------------------------------------------------------------------

#[test]
fn l_rubis_first_register_user_design_cycles_with_itself() {
    let workload = Workload::new().view("Users_by_name", ["Users"]).chain(
        Chain::new("register")
            .hop(Hop::named("check_name").reads(["Users_by_name"]))
            .hop(Hop::named("insert_user").writes(["Users"])),
    );
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["register"]);
    let paths = witness_paths(&report, "register");
    assert_eq!(
        paths[0],
        "register#1.check_name -S- register#1.insert_user -C- register#2.insert_user -C- register#1.check_name"
    );
}

fn register_v2(insert_commutes: bool) -> Chain {
    let mut insert = Hop::named("insert_user").writes(["Users"]);
    if insert_commutes {
        insert = insert.commutes_with_self();
    }
    Chain::new("register")
        .hop(
            Hop::named("claim_name")
                .reads(["Usernames"])
                .writes(["Usernames"]),
        )
        .hop(insert)
}

#[test]
fn l_rubis_usernames_design_still_cycles_with_itself() {
    let report = analyze(&Workload::new().chain(register_v2(false))).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["register"]);

    // The paper argues the cycle is spurious: when two registrations
    // conflict on the first hop, the second one does nothing in its second
    // hop. Declaring the insert self-commuting states exactly that.
    let report = analyze(&Workload::new().chain(register_v2(true))).unwrap();
    assert_consistent(&report);
    assert!(distributed(&report).is_empty());
}

fn rubis(workload: Workload) -> Workload {
    workload
        .view("Users_Comments", ["Users", "Comments"])
        .chain(
            Chain::new("place_bid")
                .hop(
                    Hop::named("insert_bid")
                        .writes(["Bids"])
                        .commutes_with_self(),
                )
                .hop(
                    Hop::named("update_price")
                        .reads(["Items"])
                        .writes(["Items"])
                        .commutes_with_self(),
                ),
        )
        .chain(Chain::new("add_item").hop(Hop::new().writes(["Items"])))
        .chain(Chain::new("view_item").hop(Hop::new().reads(["Items"])))
        .chain(register_v2(false))
        .chain(Chain::new("comment").hop(Hop::new().writes(["Comments"])))
        .chain(Chain::new("seller_comments").hop(Hop::new().reads(["Users_Comments"])))
}

#[test]
fn l_rubis_bids_run_piecewise_and_registration_cycles_only_with_itself() {
    let report = analyze(&rubis(Workload::new())).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["register"]);
    let register = report.chain("register").unwrap();
    let shortest = chains_on_cycle(&report, &register.witnesses[0]);
    assert!(
        shortest.iter().all(|chain| *chain == "register"),
        "{shortest:?}"
    );
}

/// Not a claim of the paper, but what its rules imply: a reader of the bid
/// history (an index of Bids) and a reader of Items, between them, join
/// two place_bid instances into an SC-cycle even with Figure 7's
/// annotations (bid 1 before the history read before bid 2, bid 2's price
/// before the item read before bid 1's price).
#[test]
fn l_rubis_two_readers_join_two_bids_into_a_cycle() {
    let workload = rubis(Workload::new())
        .view("Bids_by_item", ["Bids"])
        .chain(Chain::new("bid_history").hop(Hop::new().reads(["Bids_by_item"])));
    let report = analyze(&workload).unwrap();
    assert_consistent(&report);
    assert_eq!(distributed(&report), ["place_bid", "register"]);
    let place_bid = report.chain("place_bid").unwrap();
    let on_cycle = chains_on_cycle(&report, &place_bid.witnesses[0]);
    assert_eq!(on_cycle.iter().filter(|c| **c == "place_bid").count(), 4);
    assert!(on_cycle.contains(&"bid_history"));
}
