import SetteeCore
import SetteeJSON

/// Waiting until every node of a cluster has a bucket's collections manifest at least as new as an edit's (ADR 0143).
///
/// A scope or collection edit answers `{"uid":"<hex>"}` from the node that committed it; the other nodes adopt the
/// manifest with the next cluster document, and until a node has it a KV request naming the new collection there
/// answers UNKNOWN_COLLECTION. Couchbase Server offers the same wait as `POST .../scopes/@ensureManifest/<uid>`; here
/// the caller asks each node's `GET /pools/default/buckets/B/scopes` (which reads the manifest that node's KV
/// connections use) until its `uid` reaches the edit's, with `Backoff` between passes, for at most
/// `ClientLimits.manifestWaitMs`.
public enum ManifestPropagation {
    /// A manifest uid as ns_server writes it: base 16, no `0x`, at most 16 digits. Nil otherwise.
    public static func uid(_ text: String) -> UInt64? {
        guard !text.isEmpty, text.utf8.count <= 16 else { return nil }
        return UInt64(text, radix: 16)
    }

    /// The `uid` of a manifest or of an edit's answer (`{"uid":"<hex>"}`), nil when absent or malformed.
    public static func uid(of body: [UInt8]) -> UInt64? {
        (try? JSON.parse(body))?["uid"]?.stringValue.flatMap(uid)
    }

    /// The admin addresses to ask: each data node's (`kv` service) of a bucket config, its `mgmtSSL` address when
    /// `tls`, else its `mgmt` one; a node that advertises none is skipped.
    public static func adminAddresses(_ config: BucketConfig, tls: Bool) -> [NodeAddress] {
        config.nodes.compactMap { $0.kv == nil ? nil : (tls ? $0.mgmtTLS : $0.mgmt) }
    }

    /// The delay before pass `attempt` (0 is the second pass): `ClientLimits.manifestWaitFirstDelayMs` doubled,
    /// capped at `ClientLimits.manifestWaitMaxDelayMs`.
    public static func delayMs(attempt: Int) -> Int {
        Backoff.doubling(
            ClientLimits.manifestWaitFirstDelayMs, attempt: attempt, cap: ClientLimits.manifestWaitMaxDelayMs)
    }

    /// What a wait came to.
    public enum Outcome: Sendable, Equatable {
        /// Every node reported the uid or a newer one.
        case reached
        /// The budget ran out; these nodes (`HOST:PORT`) had not reported it, each with what it last said (nil: no
        /// answer, or no manifest for the bucket).
        case behind([(node: String, uid: UInt64?)])

        public static func == (a: Outcome, b: Outcome) -> Bool {
            switch (a, b) {
            case (.reached, .reached): return true
            case (.behind(let x), .behind(let y)):
                return x.map(\.node) == y.map(\.node) && x.map(\.uid) == y.map(\.uid)
            default: return false
            }
        }
    }

    /// Asks every node in `nodes` with `fetch` (the node's manifest uid, nil when it has none or did not answer; a
    /// thrown error counts as nil) until each reported `target` or more, sleeping `delayMs(attempt:)` with `sleep`
    /// between passes while the delays slept stay within `budgetMs`. A node that reached it is not asked again.
    public static func wait(
        for target: UInt64, nodes: [NodeAddress], budgetMs: Int = ClientLimits.manifestWaitMs,
        fetch: (NodeAddress) async throws -> UInt64?, sleep: (Int) async throws -> Void
    ) async throws -> Outcome {
        var pending = nodes
        var last: [NodeAddress: UInt64] = [:]
        var slept = 0
        var attempt = 0
        while true {
            var still: [NodeAddress] = []
            for node in pending {
                let uid = try? await fetch(node)
                if let uid { last[node] = uid }
                if (uid ?? 0) < target || uid == nil { still.append(node) }
            }
            pending = still
            if pending.isEmpty { return .reached }
            let delay = delayMs(attempt: attempt)
            guard slept + delay <= budgetMs else {
                return .behind(pending.map { (node: "\($0)", uid: last[$0]) })
            }
            try await sleep(delay)
            slept += delay
            attempt += 1
        }
    }
}
