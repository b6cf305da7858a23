import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// Auto-failover's quorum rules as a pure value.
@Suite struct FailureDetectorTests {
    static let five = nodeNames([0, 1, 2, 3, 4])

    /// Views where every member reaches every other except the links in `cut` (pairs, both directions) and
    /// members in `dead` (which give no view and are reached by nobody).
    static func views(_ members: [NodeID], cut: [(Int, Int)] = [], dead: Set<Int> = []) -> [NodeID: Set<NodeID>] {
        var out: [NodeID: Set<NodeID>] = [:]
        for (i, m) in members.enumerated() where !dead.contains(i) {
            out[m] = Set(
                members.indices.filter { j in
                    j != i && !dead.contains(j)
                        && !cut.contains { ($0.0 == i && $0.1 == j) || ($0.0 == j && $0.1 == i) }
                }.map { members[$0] })
        }
        return out
    }

    /// Proves the cut link: with orchestrator n0 ↔ n4 cut, n4 (which every other node reaches) is not
    /// judged down, while a fully isolated n4 is, and is failed over once down for the timeout.
    @Test func oneCutLinkIsNotADeadNode() {
        var d = FailureDetector()
        // n0 cannot reach n4, so it has n4's view neither.
        var cut = Self.views(Self.five, cut: [(0, 4)])
        cut[Self.five[4]] = nil
        for t in 0...20 {
            let v = d.round(now: .seconds(t), members: Self.five, me: Self.five[0], views: cut, timeout: .seconds(5))
            #expect(v.hasQuorum && v.down.isEmpty && v.failOver == nil, "t=\(t) \(v)")
        }
        // n4 cut from everyone (it still runs, but no one reaches it and its view is not available).
        let isolated = Self.views(Self.five, dead: [4])
        var failedAt: Int? = nil
        for t in 100...110 {
            let v = d.round(
                now: .seconds(t), members: Self.five, me: Self.five[0], views: isolated, timeout: .seconds(5))
            #expect(v.down == [Self.five[4]])
            if v.failOver != nil && failedAt == nil { failedAt = t }
        }
        #expect(failedAt == 105)
    }

    /// Proves an orchestrator cut off from the majority has no quorum and fails nobody over, even though it sees
    /// every other member as unreachable; and that a member seen again resets its "down since".
    @Test func minorityOrchestratorDoesNothing() {
        var d = FailureDetector()
        let me = Self.five[0]
        let alone: [NodeID: Set<NodeID>] = [me: []]
        for t in 0...30 {
            let v = d.round(now: .seconds(t), members: Self.five, me: me, views: alone, timeout: .seconds(5))
            #expect(!v.hasQuorum && v.failOver == nil)
        }
        // Two of five on this side: still no quorum.
        let two: [NodeID: Set<NodeID>] = [me: [Self.five[1]], Self.five[1]: [me]]
        #expect(!d.round(now: .seconds(31), members: Self.five, me: me, views: two, timeout: .seconds(5)).hasQuorum)
        // Three of five: quorum; n3 and n4 both down: two at once is left to an operator.
        let three = Self.views(Self.five, dead: [3, 4])
        let v = d.round(now: .seconds(40), members: Self.five, me: me, views: three, timeout: .seconds(0))
        #expect(v.hasQuorum && v.down == [Self.five[3], Self.five[4]] && v.failOver == nil)
        // n4 comes back: only n3 is down, and its clock did not restart; n4's did.
        let back = Self.views(Self.five, dead: [3])
        let w = d.round(now: .seconds(41), members: Self.five, me: me, views: back, timeout: .seconds(1))
        #expect(
            w.failOver == Self.five[3] && d.downSince[Self.five[3]] == .seconds(40) && d.downSince[Self.five[4]] == nil)
    }

    /// Proves the quorum arithmetic: a strict majority of the active members, this node counted once, a
    /// two-member cluster never keeps quorum after losing one, and a lone member always has it.
    @Test func quorumIsAStrictMajority() {
        let three = nodeNames([0, 1, 2])
        #expect(FailureDetector.hasQuorum(members: three, me: three[0], reachable: [three[1]]))
        #expect(!FailureDetector.hasQuorum(members: three, me: three[0], reachable: []))
        #expect(!FailureDetector.hasQuorum(members: Array(three.prefix(2)), me: three[0], reachable: []))
        #expect(FailureDetector.hasQuorum(members: [three[0]], me: three[0], reachable: []))
        #expect(!FailureDetector.hasQuorum(members: nodeNames([0, 1, 2, 3]), me: three[0], reachable: [three[1]]))
        // A silent member's missing view is no vote: n2 alone says n1 is unreachable, n0 has no view of n2's.
        let views: [NodeID: Set<NodeID>] = [three[0]: [three[1]], three[2]: [three[0]]]
        #expect(FailureDetector.down(members: three, views: views).isEmpty)
    }
}
