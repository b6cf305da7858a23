import SetteeClient
import SetteeCore
import Synchronization
import Testing

/// Waiting for every data node to report a collections edit's manifest uid (ADR 0143), with injected fetches and
/// sleeps: no sockets, no clock.
@Suite struct ManifestPropagationTests {
    let a = NodeAddress(host: "127.0.0.1", port: 9000)
    let b = NodeAddress(host: "127.0.0.1", port: 9001)

    /// Proves uids read as ns_server writes them (hex, no 0x) and from an edit's answer, and junk is nil.
    @Test func readsUIDs() {
        #expect(ManifestPropagation.uid("1f") == 31)
        #expect(ManifestPropagation.uid("") == nil && ManifestPropagation.uid("0x1") == nil)
        #expect(ManifestPropagation.uid(String(repeating: "f", count: 17)) == nil)
        #expect(ManifestPropagation.uid(of: Array(#"{"uid":"a"}"#.utf8)) == 10)
        #expect(ManifestPropagation.uid(of: Array(#"{"uid":7}"#.utf8)) == nil)
    }

    /// Proves the data nodes of a config are asked at their admin address (the TLS one for TLS) and a node without
    /// the kv service is not.
    @Test func asksTheDataNodes() throws {
        let config = try BucketConfig.parse(BucketConfigTests.rendered(rev: 1), sourceHost: "127.0.0.1")
        #expect(ManifestPropagation.adminAddresses(config, tls: false) == [a, b])
        var withoutKV = config
        withoutKV.nodes[1].kv = nil
        #expect(ManifestPropagation.adminAddresses(withoutKV, tls: false) == [a])
    }

    /// Proves the wait returns once every node reports the uid or a newer one, asking a node that reached it no
    /// more, and sleeps the doubling delays between passes.
    @Test func waitsUntilEveryNodeHasTheUID() async throws {
        let asked = Mutex<[NodeAddress]>([])
        let slept = Mutex<[Int]>([])
        let outcome = try await ManifestPropagation.wait(
            for: 5, nodes: [a, b],
            fetch: { node in
                let n = asked.withLock {
                    $0.append(node)
                    return $0.filter { $0 == node }.count
                }
                // a has it at once (a newer uid); b on its third answer, after a failure and an older uid.
                if node == a { return 6 }
                if n == 1 { throw CancellationError() }
                return n == 2 ? 4 : 5
            },
            sleep: { ms in slept.withLock { $0.append(ms) } })
        #expect(outcome == .reached)
        #expect(asked.withLock { $0 } == [a, b, b, b])
        #expect(
            slept.withLock { $0 } == [
                ClientLimits.manifestWaitFirstDelayMs, 2 * ClientLimits.manifestWaitFirstDelayMs,
            ])
    }

    /// Proves the wait is bounded: a node that never reports the uid ends it once the next delay would pass the
    /// budget, naming the node and the uid it last reported.
    @Test func givesUpAfterTheBudget() async throws {
        let slept = Mutex<[Int]>([])
        let outcome = try await ManifestPropagation.wait(
            for: 5, nodes: [a, b], budgetMs: 3_000, fetch: { $0 == a ? 5 : 3 },
            sleep: { ms in slept.withLock { $0.append(ms) } })
        #expect(outcome == .behind([(node: "127.0.0.1:9001", uid: 3)]))
        let delays = slept.withLock { $0 }
        #expect(delays.reduce(0, +) <= 3_000 && delays.last == ClientLimits.manifestWaitMaxDelayMs)
        #expect(delays == (0..<delays.count).map { ManifestPropagation.delayMs(attempt: $0) })
    }
}
