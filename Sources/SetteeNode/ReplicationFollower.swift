import Dispatch
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import Synchronization

/// Which buckets this node's replica streams follow as the registry's configs change: the decisions, as
/// pure functions of names.
///
/// A config change names one bucket, or none when every config may have changed (an adopted cluster config).
/// The buckets looked at are the named one, or else every bucket the registry holds and every bucket still
/// followed, so that a bucket a cluster config deleted is stopped too. Each one looked at is followed when this
/// node serves it (the map gives the node duties for it and its engine is open) and stopped otherwise.
public enum BucketFollowing {
    public enum Directive: Sendable, Hashable {
        /// Reconcile the bucket's replica streams with its duties (start, keep or end streams).
        case follow(String)
        /// End every stream of the bucket and forget it.
        case stop(String)
    }

    /// The buckets to look at after a change of `changed`'s config (nil: every config may have changed).
    public static func candidates(changed: String?, registered: Set<String>, followed: Set<String>) -> [String] {
        if let changed { return [changed] }
        return registered.union(followed).sorted()
    }

    /// Follow each candidate this node serves, stop the others.
    public static func directives(candidates: [String], served: Set<String>) -> [Directive] {
        candidates.map { served.contains($0) ? .follow($0) : .stop($0) }
    }

    /// The followed set after `directives` ran.
    public static func apply(_ directives: [Directive], to followed: inout Set<String>) {
        for directive in directives {
            switch directive {
            case .follow(let name): followed.insert(name)
            case .stop(let name): followed.remove(name)
            }
        }
    }
}

/// Drives the node's `ReplicationManager` from the registry's config changes (`BucketFollowing` decides),
/// and drops the copies of vBuckets this node no longer holds (moved away, or left behind by a failover).
public final class ReplicationFollower: Sendable {
    let registry: NodeRegistry
    let replication: ReplicationManager
    let logger: Logger
    private let followed = Mutex<Set<String>>([])
    /// Drops run here, in the background and one vBucket at a time: a config observer must not block.
    private let dropQueue = DispatchQueue(label: "settee.drop-unowned")

    public init(registry: NodeRegistry, replication: ReplicationManager, logger: Logger) {
        self.registry = registry
        self.replication = replication
        self.logger = logger
    }

    /// Follows every config change from now on, and reconciles every bucket once.
    public func start() {
        registry.addConfigObserver { [self] changed in configChanged(changed) }
        configChanged(nil)
    }

    /// Applies a config change (nil: every config may have changed). Runs on the registry's mutating thread.
    func configChanged(_ changed: String?) {
        let candidates = BucketFollowing.candidates(
            changed: changed, registered: Set(registry.bucketNames), followed: followed.withLock { $0 })
        var duties: [String: [VBucketDuty]] = [:]
        for name in candidates {
            if let d = registry.duties(bucket: name), registry.bucket(named: name) != nil { duties[name] = d }
        }
        let directives = BucketFollowing.directives(candidates: candidates, served: Set(duties.keys))
        for directive in directives {
            switch directive {
            case .follow(let name):
                if let d = duties[name] { replication.reconcile(bucket: name, duties: d, nodes: registry.mapNodes) }
                dropUnowned(name)
            case .stop(let name):
                replication.removeBucket(name)
            }
        }
        followed.withLock { BucketFollowing.apply(directives, to: &$0) }
    }

    /// Drops this node's data of the bucket's vBuckets it no longer owns, re-checking just before each drop
    /// that the vBucket is still unowned and dead (a rebalance may have given it back meanwhile).
    private func dropUnowned(_ name: String) {
        dropQueue.async { [registry, logger] in
            guard let engine = registry.bucket(named: name) else { return }
            for vb in registry.unownedVBuckets(bucket: name) where engine.seqnoInfo(vb).highSeqno > .zero {
                guard registry.unownedVBuckets(bucket: name).contains(vb), engine.vbucketState(vb) == .dead
                else { continue }
                do { _ = try engine.rollback(vb, to: .zero) } catch {
                    logger.warning("could not drop an unowned vBucket", metadata: ["vb": "\(vb)", "error": "\(error)"])
                }
            }
        }
    }
}
