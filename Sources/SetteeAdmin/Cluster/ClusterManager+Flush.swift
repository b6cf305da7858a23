import Foundation
import Hummingbird
import Logging
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteePeerHTTP
import SetteeRegistry
import Synchronization

/// Why a bucket flush did not happen everywhere.
public enum BucketFlushError: Error, Equatable, Sendable {
    case notFound
    /// The bucket was created without `flushEnabled` (Couchbase's 400 "Flush is disabled for the bucket").
    case disabled
    /// A rebalance moves vBuckets: flushing under it would race the copies (Couchbase refuses it too).
    case rebalanceRunning
    /// Some node did not flush (its name and why); the others did.
    case failed(String)
}

/// A bucket flush is one cluster-wide operation: whichever node is asked (REST `doFlush`, a binary FLUSH, the
/// router), the orchestrator runs it, under the topology lock so no rebalance moves vBuckets meanwhile, and
/// asks every member holding the bucket to flush its copy (`/settee/internal/flush`). Each node's engine
/// restarts every vBucket at seqno 0 under a new history, so replication, change streams and views restart
/// clean (docs/internals/change-streams.md, "Bucket flush").
extension ClusterManager {
    /// Flushes `name` on every node; forwarded to the orchestrator when this node is not it.
    public func flushBucket(_ name: String) async -> Result<Void, BucketFlushError> {
        guard let settings = registry.bucketSettings(named: name) else { return .failure(.notFound) }
        guard settings.flushEnabled else { return .failure(.disabled) }
        if let orchestrator = orchestrator(), orchestrator.id != selfID, registry.clusterSnapshot.members.count > 1 {
            return await callFlush(orchestrator.node, bucket: name, coordinate: true)
        }
        return await topologyLock.withLock { () async -> Result<Void, BucketFlushError> in
            if self.rebalance.withLock({ $0.running }) { return .failure(.rebalanceRunning) }
            return await self.flushEveryCopy(name)
        }
    }

    /// Asks every member that may hold the bucket (not failed-over ones: they hold nothing the cluster serves,
    /// and full recovery drops what they have) to flush it, in parallel.
    private func flushEveryCopy(_ name: String) async -> Result<Void, BucketFlushError> {
        let members = registry.clusterSnapshot.members.filter { $0.membership != .inactiveFailed }
        if members.count <= 1 { return await flushLocalCopy(name) }
        let me = selfID
        let failures = await withTaskGroup(of: String?.self) { group -> [String] in
            for m in members {
                group.addTask {
                    let r: Result<Void, BucketFlushError>
                    if m.id == me {
                        r = await self.flushLocalCopy(name)
                    } else {
                        r = await self.callFlush(m.node, bucket: name, coordinate: false)
                    }
                    if case .failure(let e) = r { return "\(m.id.rawValue): \(e)" }
                    return nil
                }
            }
            var out: [String] = []
            for await f in group { if let f { out.append(f) } }
            return out.sorted()
        }
        if !failures.isEmpty {
            logger.error("bucket flush incomplete", metadata: ["bucket": "\(name)", "failed": "\(failures)"])
            return .failure(.failed(failures.joined(separator: "; ")))
        }
        logger.notice("bucket flushed on every node", metadata: ["bucket": "\(name)", "nodes": "\(members.count)"])
        return .success(())
    }

    /// This node's copy: every vBucket it holds, emptied and restarted at seqno 0.
    func flushLocalCopy(_ name: String) async -> Result<Void, BucketFlushError> {
        let registry = self.registry
        do {
            try await BlockingPool.run { try registry.flushBucket(named: name) }
            return .success(())
        } catch RegistryError.notFound {
            return .failure(.notFound)
        } catch RegistryError.flushDisabled {
            return .failure(.disabled)
        } catch {
            return .failure(.failed("\(error)"))
        }
    }

    /// `POST /settee/internal/flush?bucket=` on `node`: `coordinate` asks it (the orchestrator) to run the whole
    /// cluster flush, otherwise to flush its own copy only.
    private func callFlush(_ node: NodeInfo, bucket: String, coordinate: Bool) async -> Result<Void, BucketFlushError> {
        let path =
            "/settee/internal/flush?bucket=\(PercentEncoding.encode(bucket))" + (coordinate ? "&coordinate=1" : "")
        do {
            let reply = try await peers.call(
                node, .POST, path, credentials: internalCredentials, timeout: Limits.clusterFlushTimeout)
            if reply.ok { return .success(()) }
            let text = String(decoding: reply.body, as: UTF8.self)
            switch (reply.status, text) {
            case (404, _): return .failure(.notFound)
            case (400, _) where text.contains("disabled"): return .failure(.disabled)
            case (503, _) where text.contains("Rebalance"): return .failure(.rebalanceRunning)
            default: return .failure(.failed("\(node.otpNode) answered \(reply.status): \(text)"))
            }
        } catch {
            return .failure(.failed("\(error)"))
        }
    }
}

/// The REST side of a flush: Couchbase's `doFlush` and the internal per-node call.
enum FlushRoutes {
    static func add(to router: Router<AdminRequestContext>, cluster: ClusterManager) {
        router.post("/settee/internal/flush") { request, _ in
            guard let name = queryValue(request, "bucket")
            else { return AdminResponses.general(.notFound, "no such bucket") }
            let coordinate = request.uri.queryParameters["coordinate"] == "1"
            let result = coordinate ? await cluster.flushBucket(name) : await cluster.flushLocalCopy(name)
            return response(result)
        }
    }

    /// Couchbase's answers: 200; 404 unknown bucket; 400 `{"_":"Flush is disabled for the bucket"}`;
    /// 503 while a rebalance runs; 500 naming the nodes that failed.
    static func response(_ result: Result<Void, BucketFlushError>) -> Response {
        switch result {
        case .success: return AdminResponses.empty(.ok)
        case .failure(.notFound): return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
        case .failure(.disabled): return AdminResponses.general(.badRequest, "Flush is disabled for the bucket")
        case .failure(.rebalanceRunning):
            return AdminResponses.general(.serviceUnavailable, "Rebalance running. Cannot flush the bucket.")
        case .failure(.failed(let why)):
            return AdminResponses.general(.internalServerError, "Flush failed on some nodes: \(why)")
        }
    }
}
