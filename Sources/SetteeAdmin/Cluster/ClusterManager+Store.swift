import Foundation
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeRegistry
import Synchronization

/// The brain's state is the truth, and the registry stores it (ADR 0130). The brain decides which peer document this
/// node adopts and which epoch it promises (`EpochRules`, inside `ClusterBrain`); this file performs those decisions
/// on the registry, which stores without judging (`storeClusterDocument`, `storePromise`), and loads back into the
/// brain what this node itself committed (a change in an epoch the brain claimed, a failover config it decided,
/// joining, leaving).
///
/// ```
///   POST /config, pull ──offerDocument──▶ brain: configOffered ──fence (hold)──▶ registry.setFence
///                                                               ──adopt──────────▶ storeClusterDocument(checked, promise)
///   POST /promise ──promiseRequested───▶ brain: promiseRequested ──persistPromise──▶ storePromise   (then answered)
///   own change ─────stored { write }───▶ registry write ──loadCommitted──▶ brain: configLoaded, settingsChanged
/// ```
///
/// Every one of these runs under `storeOrder`, the brain's decision and its persistence together: the store then
/// holds the brain's decisions in the order it took them (two adoptions, or a promise and an adoption, never land
/// reversed), and the brain decides each event on exactly what the store holds.
extension ClusterManager {
    /// Offers a peer's cluster document (pushed to `POST /settee/internal/config`, or pulled after a heartbeat showed a
    /// newer one) to the brain (`configOffered`), and stores it when the brain adopts it (`.adopt`), after the hold the
    /// brain may put up first (`.fence`: an unconfirmed epoch's actives are held before the config applies). The
    /// store keeps the brain's promise, never the sender's. The document is decoded and checked once
    /// (`NodeRegistry.checkedDocument`): the brain judges its snapshot and the store stores that same decoded document.
    /// A document that fails the registry's checks throws `RegistryError` before the brain sees it; one of another
    /// cluster (a different identity uuid) is not offered and returns false. Returns whether it was stored. Blocking
    /// (fsync, engines).
    func offerDocument(_ bytes: [UInt8]) throws -> Bool {
        let checked = try registry.checkedDocument(bytes)
        let offered = checked.snapshot
        return try storeOrder.withLock { _ throws -> Bool in
            guard offered.identity.uuid == registry.clusterIdentity.uuid else { return false }
            let directives = feed(.configOffered(from: offered.orchestrator ?? selfID, Self.brainConfig(offered)))
            applyFences(directives)
            let adopted = directives.contains {
                if case .adopt = $0 { return true }
                return false
            }
            guard adopted else { return false }
            do {
                try registry.storeClusterDocument(checked, promise: brain.withLock { $0.promise })
            } catch {
                // The brain took a config the store could not hold: it goes back to what the store holds.
                loadCommitted()
                throw error
            }
            // The document's auto-failover settings reach the brain too.
            loadCommitted()
            return true
        }
    }

    /// A candidate's request for `epoch` (`POST /settee/internal/promise`), decided by the brain
    /// (`promiseRequested`, `EpochRules.grants`). A granted promise is persisted before this returns, so a promise
    /// the candidate hears is durable. Returns whether it was granted; throws when the grant could not be persisted
    /// (the candidate then hears an error, never a grant). Blocking (fsync).
    func promiseRequested(from candidate: NodeID, epoch: Int64, stamp: ConfigStamp) throws -> Bool {
        try storeOrder.withLock { _ throws -> Bool in
            var granted = false
            var persist = false
            for d in feed(.promiseRequested(from: candidate, epoch: epoch, stamp: stamp)) {
                switch d {
                case .persistPromise: persist = true
                case .answerPromise(_, _, let yes): granted = yes
                default: break
                }
            }
            if persist { try storeBrainPromise() }
            return granted
        }
    }

    /// Persists the brain's promise as it is now (`.persistPromise` of this node's own claim): the latest promise,
    /// read in the store's order, so a later promise is never overwritten by an earlier one. Blocking (fsync).
    func persistBrainPromise() throws {
        try storeOrder.withLock { _ throws in try storeBrainPromise() }
    }

    /// Called with `storeOrder` held.
    private func storeBrainPromise() throws {
        if let promise = brain.withLock({ $0.promise }) { try registry.storePromise(promise) }
    }

    /// Runs `write`, a registry call that commits a change of the cluster document this node made (a change in an
    /// epoch the brain claimed, a failover config the brain decided, the auto-failover count, joining or leaving a
    /// cluster), in the store's order, then loads what it committed into the brain (`loadCommitted`). Returns or
    /// throws what `write` does. Blocking.
    func stored<T: Sendable>(_ write: () throws -> T) throws -> T {
        try storeOrder.withLock { _ throws -> T in
            defer { loadCommitted() }
            return try write()
        }
    }

    /// Brings the brain to what the store holds after this node's own write: its config (`configLoaded`, with the
    /// brain's own promise: the store only ever holds a promise the brain made) and its auto-failover settings
    /// (`settingsChanged`). A hold the new config leads to is applied at once. Called with `storeOrder` held.
    func loadCommitted() {
        let config = Self.brainConfig(registry.clusterSnapshot)
        let settings = registry.autoFailover
        let now = brainNow
        let out = brain.withLock { b -> [ClusterBrain.Directive] in
            var out: [ClusterBrain.Directive] = []
            if b.config != config { out += b.handle(.configLoaded(config, promise: b.promise), now: now) }
            let auto = settings.enabled && settings.count < settings.maxCount
            if b.autoFailover != auto || b.timing.failoverTimeout != .seconds(settings.timeout) {
                out += b.handle(
                    .settingsChanged(autoFailover: auto, failoverTimeout: .seconds(settings.timeout)), now: now)
            }
            applyLease(b.lease)
            return out
        }
        applyFences(out)
    }

    /// Applies the fence directives among `directives` on the spot (the rest are the caller's).
    func applyFences(_ directives: [ClusterBrain.Directive]) {
        for d in directives {
            switch d {
            case .fence(let reason): registry.setFence(reason)
            case .unfence: registry.setFence(nil)
            default: break
            }
        }
    }
}
