import SetteeCore
import SetteeJSON
import SetteeSync
import Testing

private func user(_ name: String, seq: UInt64 = 1, channels: [String: UInt64] = [:], roles: [String: UInt64] = [:])
    -> Principal
{
    var p = Principal(name: name, isRole: false, sequence: seq)
    p.adminChannelSequences = channels
    p.adminRoleSequences = roles
    return p
}

private func role(_ name: String, channels: [String: UInt64]) -> Principal {
    var p = Principal(name: name, isRole: true, sequence: 1)
    p.adminChannelSequences = channels
    return p
}

@Suite struct AccessIndexTests {
    // Proves the TimedSet rules for one user: `!` at 1, explicit channels at their sequence, access()
    // grants at the granting revision's sequence, and the earliest route winning.
    @Test func directGrants() {
        var index = AccessIndex()
        let r = index.update(docID: "d1", sequence: 10, access: ["jane": ["a", "b"]], roles: [:])
        #expect(r.changed == ["jane"])
        index.update(docID: "d2", sequence: 20, access: ["jane": ["b", "c"]], roles: [:])
        let jane = user("jane", channels: ["c": 5])
        #expect(index.effectiveChannels(of: jane) { _ in nil } == ["!": 1, "a": 10, "b": 10, "c": 5])
        #expect(index.accessGrants(to: "jane") == ["a": 10, "b": 10, "c": 20])
    }

    // Proves revocation: a new revision that no longer grants a channel removes it, a grant kept
    // across revisions keeps its first sequence, a tombstone (no grants) revokes everything, and only
    // the affected principals are reported.
    @Test func revocationAndContinuity() {
        var index = AccessIndex()
        index.update(docID: "d", sequence: 3, access: ["jane": ["a", "b"], "joe": ["a"]], roles: [:])
        let r = index.update(docID: "d", sequence: 7, access: ["jane": ["a", "c"], "joe": ["a"]], roles: [:])
        #expect(r.changed == ["jane"])
        #expect(r.grants.access["jane"] == ["a": 3, "c": 7])
        #expect(index.accessGrants(to: "jane") == ["a": 3, "c": 7])
        let same = index.update(docID: "d", sequence: 9, access: ["jane": ["a", "c"], "joe": ["a"]], roles: [:])
        #expect(same.changed.isEmpty)
        let gone = index.update(docID: "d", sequence: 11, access: [:], roles: [:])
        #expect(gone.changed == ["jane", "joe"])
        #expect(index.accessGrants(to: "jane").isEmpty)
        #expect(index.byDoc.isEmpty)
        #expect(index.effectiveChannels(of: user("jane")) { _ in nil } == ["!": 1])
    }

    // Proves role chains: user -> role (explicit or role()) -> channels (explicit or access() to
    // role:NAME), visible at max(role grant, channel grant), earliest route winning, revoked with the role.
    @Test func roleChains() {
        var index = AccessIndex()
        let editor = role("editor", channels: ["drafts": 2])
        let roles = ["editor": editor]
        index.update(docID: "g", sequence: 30, access: ["role:editor": ["reviews"]], roles: [:])
        index.update(docID: "r", sequence: 40, access: [:], roles: ["jane": ["editor"]])
        let jane = user("jane")
        #expect(index.effectiveRoles(of: jane) == ["editor": 40])
        #expect(index.effectiveChannels(of: jane) { roles[$0] } == ["!": 1, "drafts": 40, "reviews": 40])
        // An explicit role granted earlier wins for the role; channels then appear at max(role, channel).
        let jane2 = user("jane", roles: ["editor": 5])
        #expect(index.effectiveChannels(of: jane2) { roles[$0] } == ["!": 1, "drafts": 5, "reviews": 30])
        #expect(index.usersGranted(role: "editor") == ["jane"])
        // Revoke role() and the access() to the role.
        index.update(docID: "r", sequence: 50, access: [:], roles: [:])
        index.update(docID: "g", sequence: 51, access: [:], roles: [:])
        #expect(index.effectiveChannels(of: jane) { roles[$0] } == ["!": 1])
        #expect(index.effectiveChannels(of: jane2) { roles[$0] } == ["!": 1, "drafts": 5])
        // A role that does not exist contributes only access() grants to it.
        index.update(docID: "g", sequence: 60, access: ["role:ghost": ["x"]], roles: ["jane": ["ghost"]])
        #expect(index.effectiveChannels(of: jane) { roles[$0] } == ["!": 1, "x": 60])
        #expect(index.effectiveChannels(ofRole: editor) == ["drafts": 2])
    }

    // Proves `*` and `!` in canSee: star users see everything (also docs in no channel), `!` docs are
    // public, other docs need an intersection.
    @Test func canSee() {
        #expect(ChannelAccess.canSee(userChannels: ["*"], docChannels: []))
        #expect(ChannelAccess.canSee(userChannels: ["a"], docChannels: ["!"]))
        #expect(!ChannelAccess.canSee(userChannels: ["a", "!"], docChannels: []))
        #expect(!ChannelAccess.canSee(userChannels: ["a", "!"], docChannels: ["b", "*"]))
        #expect(ChannelAccess.canSee(userChannels: ["a", "b", "c"], docChannels: ["c"]))
        #expect(ChannelAccess.canSee(userChannels: ["c": 4], docChannels: ["x", "c"]))
        #expect(!ChannelAccess.canSee(userChannels: ["c": 4], docChannels: ["x"]))
    }

    // Proves DocGrants round-trip through their stored JSON and `restore` rebuilds the same index.
    @Test func storedGrantsRoundTrip() throws {
        var index = AccessIndex()
        let g = index.update(
            docID: "d", sequence: 8, access: ["jane": ["a"], "role:ed": ["b"]], roles: ["joe": ["ed"]]
        )
        .grants
        let text = g.json().text
        #expect(text == #"{"access":{"jane":{"a":8},"role:ed":{"b":8}},"role_access":{"joe":{"ed":8}}}"#)
        var rebuilt = AccessIndex()
        rebuilt.restore(docID: "d", grants: AccessIndex.DocGrants(json: try JSON.parse(text)))
        #expect(rebuilt == index)
        rebuilt.remove(docID: "d")
        #expect(rebuilt == AccessIndex())
    }

    // Proves, on random histories (printed seed), that the incremental index answers exactly what a
    // brute-force recomputation from a flat list of grants gives: effective channels and roles of
    // every user, and that canSee agrees with that list for random docs.
    @Test(arguments: [UInt64(1), 2, 3, 0xC0FFEE])
    func modelCheck(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        print("AccessIndex model check seed \(seed)")
        let users = ["u0", "u1", "u2", "u3"]
        let roleNames = ["r0", "r1", "r2"]
        let channels = ["c0", "c1", "c2", "c3", "c4"]
        let docs = ["d0", "d1", "d2", "d3", "d4", "d5"]
        var index = AccessIndex()
        // The model: (doc, principal, name) -> since, for access and roles; rebuilt naively per step.
        var modelAccess: [String: [String: [String: UInt64]]] = [:]  // doc -> principal -> channel -> since
        var modelRoles: [String: [String: [String: UInt64]]] = [:]
        var principals: [String: Principal] = [:]
        var roles: [String: Principal] = [:]
        for u in users { principals[u] = user(u) }
        var seq: UInt64 = 1
        var mismatches = 0
        for _ in 0..<600 {
            seq += 1
            switch rng.next() % 6 {
            case 0, 1, 2:
                let doc = docs.randomElement(using: &rng)!
                var access: [String: Set<String>] = [:]
                var roleGrants: [String: Set<String>] = [:]
                for _ in 0..<(rng.next() % 4) {
                    let p =
                        rng.next() % 3 == 0
                        ? "role:" + roleNames.randomElement(using: &rng)! : users.randomElement(using: &rng)!
                    access[p, default: []].insert(channels.randomElement(using: &rng)!)
                }
                for _ in 0..<(rng.next() % 3) {
                    roleGrants[users.randomElement(using: &rng)!, default: []].insert(
                        roleNames.randomElement(using: &rng)!)
                }
                index.update(docID: doc, sequence: seq, access: access, roles: roleGrants)
                func carry(_ old: [String: [String: UInt64]]?, _ new: [String: Set<String>]) -> [String: [String:
                    UInt64]]
                {
                    var out: [String: [String: UInt64]] = [:]
                    for (p, set) in new { for c in set { out[p, default: [:]][c] = old?[p]?[c] ?? seq } }
                    return out
                }
                modelAccess[doc] = carry(modelAccess[doc], access)
                modelRoles[doc] = carry(modelRoles[doc], roleGrants)
            case 3:
                let u = users.randomElement(using: &rng)!
                var p = principals[u]!
                p.sequence = seq
                p.adminChannels = Set(channels.filter { _ in rng.next() % 3 == 0 })
                p.adminRoles = Set(roleNames.filter { _ in rng.next() % 4 == 0 })
                principals[u] = p
            case 4:
                let r = roleNames.randomElement(using: &rng)!
                if rng.next() % 4 == 0 {
                    roles[r] = nil
                } else {
                    var p = roles[r] ?? Principal(name: r, isRole: true)
                    p.sequence = seq
                    p.adminChannels = Set(channels.filter { _ in rng.next() % 3 == 0 })
                    roles[r] = p
                }
            default:
                let doc = docs.randomElement(using: &rng)!
                index.remove(docID: doc)
                modelAccess[doc] = nil
                modelRoles[doc] = nil
            }
            // Brute force: enumerate every route.
            for u in users {
                let p = principals[u]!
                var expectedRoles: [String: UInt64] = p.adminRoleSequences
                for (_, grants) in modelRoles {
                    for (name, set) in grants where name == u {
                        for (r, s) in set { expectedRoles[r] = min(expectedRoles[r] ?? .max, s) }
                    }
                }
                var expected: [String: UInt64] = ["!": 1]
                func offer(_ c: String, _ s: UInt64) { expected[c] = min(expected[c] ?? .max, s) }
                for (c, s) in p.adminChannelSequences { offer(c, s) }
                for (_, grants) in modelAccess {
                    for (name, set) in grants {
                        if name == u { for (c, s) in set { offer(c, s) } }
                        if name.hasPrefix("role:"), let since = expectedRoles[String(name.dropFirst(5))] {
                            for (c, s) in set { offer(c, max(since, s)) }
                        }
                    }
                }
                for (r, since) in expectedRoles {
                    for (c, s) in roles[r]?.adminChannelSequences ?? [:] { offer(c, max(since, s)) }
                }
                let got = index.effectiveChannels(of: p) { roles[$0] }
                if got != expected || index.effectiveRoles(of: p) != expectedRoles { mismatches += 1 }
                let docChannels = Set(channels.filter { _ in rng.next() % 3 == 0 })
                let visible = !docChannels.isDisjoint(with: expected.keys)
                if ChannelAccess.canSee(userChannels: got, docChannels: docChannels) != visible { mismatches += 1 }
            }
        }
        #expect(mismatches == 0, "seed \(seed)")
    }
}
