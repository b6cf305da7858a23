import Foundation
import NIOCore
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeProtocol
import SetteeTorture
import Synchronization

/// Nanoseconds on the monotonic clock every history time is taken from.
func nowNs() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// The recorded history, appended to by every client task.
final class HistoryLog: Sendable {
    private let entries = Mutex<[TortureEntry]>([])
    func append(_ e: TortureEntry) { entries.withLock { $0.append(e) } }
    var all: [TortureEntry] { entries.withLock { $0 } }
}

/// What one client error says about whether a mutation happened. Only answers that the server gave before
/// applying anything are `fail`; everything else (no reply, ambiguous durability, a status we cannot place)
/// is `info`, which the checkers treat as "may have happened".
func outcome(ofWrite error: any Error) -> TortureOutcome {
    guard let e = error as? ClientError else { return .info }
    switch e {
    case .durabilityImpossible, .temporaryFailure, .syncWriteInProgress, .noActiveNode, .durabilityInvalidLevel,
        .outOfMemory, .valueTooLarge, .invalidArguments, .accessDenied, .authenticationFailed, .bucketNotFound,
        .locked, .casMismatch, .keyNotFound, .notStored, .deltaBadValue, .collectionNotFound:
        return .fail
    case .timeout:
        // The client documents `.timeout` for writes only when the request was never sent.
        return .fail
    case .keyExists, .durabilityAmbiguous, .ambiguous, .server, .closed, .bootstrapFailed, .invalidConfig:
        return .info
    }
}

/// The workload: `processes` logical clients, each one operation at a time, through one smart client.
/// Per operation: 60% durable inserts of fresh keys (the lost-write check), 15% durable register writes,
/// 15% register reads (linearizability), 10% durable counter increments (counter bounds).
struct Workload {
    let client: BucketClient
    let log: HistoryLog
    let processes: Int
    let registers: Int
    let counters: Int
    let seed: UInt64
    let durability: DurabilityLevel = .majority

    func run(until deadline: UInt64) async {
        await withTaskGroup(of: Void.self) { group in
            for p in 0..<processes {
                group.addTask { await runProcess(p, until: deadline) }
            }
        }
    }

    private func runProcess(_ p: Int, until deadline: UInt64) async {
        var rng = SplitMix64(seed: seed &+ UInt64(p) &* 0x9E37_79B9)
        var n = 0
        while nowNs() < deadline {
            n += 1
            let roll = Int.random(in: 0..<100, using: &rng)
            let op: TortureOperation
            if roll < 60 {
                op = .insert(key: "ins:\(p):\(n)")
            } else if roll < 75 {
                op = .write(key: "reg:\(Int.random(in: 0..<registers, using: &rng))", value: p * 1_000_000 + n)
            } else if roll < 90 {
                op = .read(key: "reg:\(Int.random(in: 0..<registers, using: &rng))")
            } else {
                op = .add(key: "ctr:\(Int.random(in: 0..<counters, using: &rng))", delta: 1)
            }
            let start = nowNs()
            let result = await perform(op)
            log.append(
                TortureEntry(process: p, operation: op, invokeNs: start, completeNs: nowNs(), outcome: result))
            if case .info = result { try? await Task.sleep(for: .milliseconds(20)) }
        }
    }

    private func perform(_ op: TortureOperation) async -> TortureOutcome {
        do {
            switch op {
            case .insert(let key):
                _ = try await client.insert(key, Array("{\"k\":\"\(key)\"}".utf8), durability: durability)
                return .ok
            case .write(let key, let value):
                _ = try await client.upsert(key, Array(String(value).utf8), durability: durability)
                return .ok
            case .read(let key):
                do {
                    let r = try await client.get(key)
                    return .ok(read: Int(String(decoding: r.value, as: UTF8.self)))
                } catch ClientError.keyNotFound {
                    return .ok(read: nil)
                } catch {
                    return .info
                }
            case .add(let key, let delta):
                _ = try await client.increment(
                    key, delta: UInt64(delta), initial: UInt64(delta), durability: durability)
                return .ok
            }
        } catch {
            return outcome(ofWrite: error)
        }
    }
}

/// Polls every node's own view of the bucket map and records which vBuckets each believes it is active for.
/// A node that was failed over but still believes itself active shows up as a second claim.
final class ClaimMonitor: Sendable {
    private let claims = Mutex<[TortureChecks.ActiveClaim]>([])
    var all: [TortureChecks.ActiveClaim] { claims.withLock { $0 } }

    /// One sampling round: every node's own claims, then, for the vBuckets two nodes claim, a probe of each
    /// claimant over KV (a GET with that vBucket): a node that answers NOT_MY_VBUCKET (it fenced itself) or
    /// does not answer (paused) is not serving it, so only nodes that would really take a write count.
    func sample(_ cluster: NetnsCluster, bucket: String, probe client: BucketClient) async {
        var round: [TortureChecks.ActiveClaim] = []
        await withTaskGroup(of: TortureChecks.ActiveClaim?.self) { group in
            for i in cluster.nodes.indices where cluster.isRunning(i) {
                group.addTask {
                    guard let r = try? await cluster.http(i, .GET, "/pools/default/b/\(bucket)"), r.status == 200,
                        let doc = try? JSON.parse(r.body)
                    else { return nil }
                    let me = "\(cluster.nodes[i].address):\(cluster.kvPort)"
                    let map = doc["vBucketServerMap"]
                    guard let servers = map?["serverList"]?.arrayValue?.compactMap(\.stringValue),
                        let own = servers.firstIndex(of: me), let chains = map?["vBucketMap"]?.arrayValue
                    else { return nil }
                    var active: Set<Int> = []
                    for (vb, chain) in chains.enumerated() where chain.arrayValue?.first?.intValue == own {
                        active.insert(vb)
                    }
                    return TortureChecks.ActiveClaim(node: "n\(i)", atNs: nowNs(), activeVBuckets: active)
                }
            }
            for await c in group { if let c { round.append(c) } }
        }
        var owners: [Int: [Int]] = [:]
        for (i, c) in round.enumerated() { for vb in c.activeVBuckets { owners[vb, default: []].append(i) } }
        // Every contested (vBucket, claimant) pair is probed, in parallel over the client's connections.
        let contested = owners.filter { $0.value.count > 1 }.flatMap { vb, claimants in claimants.map { (vb, $0) } }
        let notServing = await withTaskGroup(of: (Int, Int)?.self) { group in
            for (vb, i) in contested {
                guard let n = Int(round[i].node.dropFirst()) else { continue }
                let address = NodeAddress(host: cluster.nodes[n].address, port: cluster.kvPort)
                group.addTask {
                    let request = RequestFrame(
                        opcode: .get, vbucket: UInt16(vb), key: ByteBuffer(string: "torture-probe"))
                    guard let r = try? await client.send(request, to: address, timeoutMs: 1_000),
                        r.status != .notMyVBucket
                    else { return (vb, i) }
                    return nil
                }
            }
            var out: [(Int, Int)] = []
            for await pair in group { if let pair { out.append(pair) } }
            return out
        }
        for (vb, i) in notServing { round[i].activeVBuckets.remove(vb) }
        claims.withLock { $0.append(contentsOf: round) }
    }

    /// The map revision each running node serves, to check convergence after healing.
    static func revisions(_ cluster: NetnsCluster, bucket: String) async -> [Int: String] {
        var out: [Int: String] = [:]
        for i in cluster.nodes.indices where cluster.isRunning(i) {
            guard let r = try? await cluster.http(i, .GET, "/pools/default/b/\(bucket)"), r.status == 200,
                let doc = try? JSON.parse(r.body)
            else { continue }
            out[i] = "\(doc["revEpoch"]?.intValue ?? 0).\(doc["rev"]?.intValue ?? 0)"
        }
        return out
    }
}
