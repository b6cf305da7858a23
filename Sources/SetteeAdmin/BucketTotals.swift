import Foundation
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import Synchronization

/// A bucket's mutation rate over a recent window, from successive totals (pure: time is passed in).
/// Totals are the sum of the high seqnos of this node's active vBuckets, so the rate counts KV mutations
/// (sets, deletes, increments, expirations) the way the console's ops column does.
struct OpsRateWindow: Sendable, Equatable {
    private(set) var samples: [(at: Double, total: Int64)] = []

    static func == (a: OpsRateWindow, b: OpsRateWindow) -> Bool {
        a.samples.map(\.at) == b.samples.map(\.at) && a.samples.map(\.total) == b.samples.map(\.total)
    }

    /// Records `total` at `seconds` (monotonic) and returns mutations per second since the oldest sample of the
    /// last `Limits.adminOpsRateWindowSeconds` (or the latest older one when none in the window is at least
    /// `Limits.adminOpsRateMinimumSpanMilliseconds` old); 0 for the first sample, a total that went down (flush,
    /// failover moved vBuckets) or no elapsed time.
    mutating func record(total: Int64, at seconds: Double) -> Double {
        let window = Double(Limits.adminOpsRateWindowSeconds)
        // Samples older than the window go, except the newest of them, so a rarely polled bucket still gets a rate.
        while samples.count > 1, seconds - samples[1].at > window { samples.removeFirst() }
        defer {
            samples.append((seconds, total))
            let excess = samples.count - Limits.adminOpsRateSamples
            if excess > 0 { samples.removeFirst(excess) }
        }
        guard var base = samples.first else { return 0 }
        let minimumSpan = Double(Limits.adminOpsRateMinimumSpanMilliseconds) / 1000
        if samples.count > 1, seconds - base.at > window, seconds - samples[1].at >= minimumSpan {
            base = samples[1]
        }
        guard total >= base.total else {
            samples.removeAll()
            return 0
        }
        guard seconds > base.at else { return 0 }
        return Double(total - base.total) / (seconds - base.at)
    }
}

/// The per-bucket rate windows of one node (shared by the admin handlers).
final class BucketOpsRates: Sendable {
    private let windows = Mutex<[String: OpsRateWindow]>([:])
    private let origin = ContinuousClock.now

    func record(bucket: String, total: Int64) -> Double {
        let elapsed = ContinuousClock.now - origin
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return windows.withLock { $0[bucket, default: OpsRateWindow()].record(total: total, at: seconds) }
    }
}

/// What the other nodes holding active vBuckets of a bucket report of their share.
struct PeerShares: Sendable, Equatable {
    var itemCount = 0
    var opsPerSec = 0.0
    /// `otpNode` names of nodes that did not answer in time (their items are not in the total).
    var missing: [String] = []

    /// Adds one peer's `basicStats` (untrusted: negative or absurd values are clamped, sums saturate).
    mutating func add(itemCount: Int, opsPerSec: Double) {
        let (sum, overflow) = self.itemCount.addingReportingOverflow(max(0, itemCount))
        self.itemCount = overflow ? Int.max : sum
        if opsPerSec.isFinite, opsPerSec > 0 { self.opsPerSec += opsPerSec }
    }

    /// This node's stats made the bucket's: items and ops summed, nodes that did not answer named.
    func total(_ local: BucketBasicStats) -> BucketBasicStats {
        var s = local
        let (sum, overflow) = s.itemCount.addingReportingOverflow(itemCount)
        s.itemCount = overflow ? Int.max : sum
        s.opsPerSec += opsPerSec
        s.nodesNotCounted = missing
        if !missing.isEmpty, s.statusReason == nil {
            s.statusReason =
                "itemCount and opsPerSec leave out nodes that did not answer: "
                + missing.joined(separator: ", ")
        }
        return s
    }
}

extension AdminAPI {
    /// Asks every other node holding active vBuckets of `bucket` for its share (`GET …/buckets/B?local=1`), in
    /// parallel with a short deadline, as Couchbase sums each node's active items. Nil on a lone node.
    func peerShares(bucket: String, map: ClusterMap) async -> PeerShares? {
        guard let peers = cluster?.peers else { return nil }
        let others = Set(map.vbucketMap.chains.compactMap { $0.first }).subtracting([map.thisNode])
        let nodes = others.sorted().filter { $0 >= 0 && $0 < map.nodes.count }.map { map.nodes[$0] }
        guard !nodes.isEmpty else { return nil }
        let creds = registry.internalCredentials
        let path = "/pools/default/buckets/\(PercentEncoding.encode(bucket))?local=1"
        let answers = await withTaskGroup(of: (String, (Int, Double)?).self) { group in
            for node in nodes {
                group.addTask {
                    guard
                        let reply = try? await peers.call(
                            PeerEndpoint.admin(node), .GET, path,
                            credentials: (creds.username, creds.password),
                            timeout: .milliseconds(Limits.adminPeerStatsTimeoutMilliseconds)),
                        reply.ok,
                        let stats = (try? JSON.parse(reply.body))?["basicStats"], stats.objectValue != nil
                    else { return (node.name, nil) }
                    return (node.name, (stats["itemCount"]?.intValue ?? 0, stats["opsPerSec"]?.numberValue ?? 0))
                }
            }
            var out: [(String, (Int, Double)?)] = []
            for await a in group { out.append(a) }
            return out
        }
        var shares = PeerShares()
        for (name, answer) in answers.sorted(by: { $0.0 < $1.0 }) {
            if let (items, ops) = answer {
                shares.add(itemCount: items, opsPerSec: ops)
            } else {
                shares.missing.append(name)
            }
        }
        return shares
    }

    /// Each node's status for a bucket's `nodes[]`: heartbeats (unreachable peers are "unhealthy"), this node's
    /// own runtime status (warmup, disk failure), and "unhealthy" for a node that did not answer just now.
    func nodeStatuses(_ map: ClusterMap, runtime: NodeRuntime, missing: [String]) -> [String: String] {
        var out: [String: String] = [:]
        for (i, n) in map.nodes.enumerated() {
            if i == map.thisNode {
                out[n.name] = runtime.status
            } else if missing.contains(n.name) {
                out[n.name] = "unhealthy"
            } else if let cluster {
                out[n.name] = cluster.status(of: n.otpNode)
            }
        }
        return out
    }
}
