import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeStorage
import Synchronization

/// The node's open bucket engines, the listed buckets that failed to open, their directories, and the bucket
/// generation KV connections cache their lookups by: the registry's bucket store (issue 69 item 2, ADR 0139).
///
/// Owns its state under its own lock, held briefly (never across an engine's open, flush or shutdown). Which buckets
/// exist and with what settings is the committed metadata's (`ClusterSnapshotStore`); this store holds the engines
/// that serve them. `NodeRegistry` changes both in one `mutations` hold, the engines inside the snapshot store's
/// `publish` (lock order: the snapshot store's lock, then this one).
@usableFromInline final class BucketStore: Sendable {
    struct State: Sendable {
        var engines: [String: BucketEngine] = [:]
        /// Listed buckets whose engine failed to open at start, with the reason.
        var failed: [String: String] = [:]
        /// `shutDown()` ran: engines are closed and nothing opens again.
        var isShutDown = false
    }

    /// Written into a bucket's directory before it is unlisted: a directory that carries it is a deletion to finish
    /// at start, never data to keep.
    static let deletedMarker = ".settee-bucket-deleted"

    /// `<dataDir>/buckets`.
    let directory: String
    private let state = Mutex(State())
    /// Bumped after every change of the bucket set or a bucket's settings, so connections can cache their bucket
    /// lookup and re-resolve only when this moves (one relaxed load per operation).
    @usableFromInline let generation = Atomic<Int>(0)

    init(directory: String) { self.directory = directory }

    /// The directory of a bucket's engine files: `<dataDir>/buckets/<name>-<uuid>`.
    func directory(for settings: BucketSettings) -> String {
        directory + "/" + settings.name + "-" + settings.uuid
    }

    func engine(named name: String) -> BucketEngine? { state.withLock { $0.engines[name] } }

    /// Every open engine by bucket name.
    var engines: [String: BucketEngine] { state.withLock { $0.engines } }

    /// Why a listed bucket is not served (its engine failed to open or verify at start), nil otherwise.
    func failure(named name: String) -> String? { state.withLock { $0.failed[name] } }

    func setFailure(_ reason: String?, named name: String) { state.withLock { $0.failed[name] = reason } }

    /// Applies `update` to the open engines (`NodeRegistry.commit`, inside the snapshot store's `publish`).
    func update(_ update: (inout [String: BucketEngine]) -> Void) { state.withLock { update(&$0.engines) } }

    var isShutDown: Bool { state.withLock { $0.isShutDown } }

    /// Marks the store shut down and hands its engines over to be shut down (by the caller, outside the lock).
    func shutDown() -> [String: BucketEngine] {
        state.withLock { s in
            let engines = s.engines
            s.engines.removeAll()
            s.isShutDown = true
            return engines
        }
    }

    func bumpGeneration() { generation.wrappingAdd(1, ordering: .releasing) }

    /// Removes directories the metadata does not list (`known`: `<name>-<uuid>`) that carry the deletion marker; logs
    /// and keeps any other.
    func removeOrphanDirectories(known: Set<String>, logger: Logger) {
        for entry in DataDirectory.listDirectory(directory) where !known.contains(entry) && !entry.hasPrefix(".") {
            let dir = directory + "/" + entry
            guard FileManager.default.fileExists(atPath: dir + "/" + Self.deletedMarker) else {
                logger.warning(
                    "bucket directory not listed in the node metadata; left in place (remove it by hand once it is not needed)",
                    metadata: ["directory": "\(dir)"])
                continue
            }
            do {
                try DataDirectory.remove(dir)
                logger.notice("finished deleting a deleted bucket's directory", metadata: ["directory": "\(entry)"])
            } catch {
                logger.error("cannot remove a deleted bucket's directory", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Marks a bucket's directory as deleted before the bucket is unlisted, so a crash before its files are gone lets
    /// the next start finish the deletion (and only such directories are ever removed).
    func markDeleted(_ settings: BucketSettings, logger: Logger) {
        let dir = directory(for: settings)
        guard FileManager.default.fileExists(atPath: dir) else { return }
        do { try DataDirectory.writeAtomically([], to: dir + "/" + Self.deletedMarker) } catch {
            logger.warning("cannot mark a deleted bucket's directory", metadata: ["error": "\(error)"])
        }
    }
}
