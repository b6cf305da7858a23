import Logging
import SetteeCore
import SetteeRegistry
import SetteeStorage

/// The node's auto-compaction (ADR 0159): every `interval` it reads each of its buckets' disk figures, asks
/// `AutoCompaction.decide` with the cluster's settings (`/settings/autoCompaction`), and performs the answer: a
/// measure of the item pages' fill, or a compaction through the same `BucketCompactions` the REST API starts (so one
/// runs per bucket at most, shown in `/pools/default/tasks`, cancellable). Each node compacts its own files, as
/// ns_server's per-node compaction daemon does. The figures are read on the blocking pool.
public struct AutoCompactionChecks: Sendable {
    let registry: NodeRegistry
    let compactions: BucketCompactions
    let interval: Duration
    let logger: Logger

    /// `interval`: between two checks (`Limits.autoCompactionCheckSeconds`; process tests pass less).
    public init(registry: NodeRegistry, compactions: BucketCompactions, interval: Duration, logger: Logger) {
        self.registry = registry
        self.compactions = compactions
        self.interval = interval
        self.logger = logger
    }

    /// Checks every `interval` until the task is cancelled.
    public func run() async {
        var fills: [String: AutoCompaction.Fill] = [:]
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            await check(fills: &fills)
        }
    }

    /// One check of every bucket on this node; `fills` keeps the last fill measured per bucket (dropped when a
    /// compaction starts: it changes the fill).
    func check(fills: inout [String: AutoCompaction.Fill]) async {
        let settings = registry.autoCompaction
        let names = registry.bucketNames
        fills = fills.filter { names.contains($0.key) }
        for name in names {
            guard let engine = registry.bucket(named: name) else { continue }
            let views = compactions.views
            let (data, viewFigures) = await BlockingPool.run {
                (engine.diskFigures(), views?.diskFigures(bucket: name) ?? DiskFigures())
            }
            guard let data else { continue }
            var files = AutoCompaction.Files(
                data: data, views: viewFigures, fill: fills[name], compacting: compactions.run(of: name) != nil)
            var decision = AutoCompaction.decide(settings, files)
            if decision == .measureFill {
                let unused = await BlockingPool.run { engine.itemsUnusedPercent() }
                guard let unused else { continue }
                let fill = AutoCompaction.Fill(unusedPercent: unused, atPages: data.pages)
                fills[name] = fill
                files.fill = fill
                decision = AutoCompaction.decide(settings, files)
            }
            guard case .compact(let includeViews, let repackAt) = decision else { continue }
            let started = await compactions.start(
                bucket: name, engine: engine, includeViews: includeViews, repackAtUnusedPercent: repackAt,
                keepsWAL: true)
            if started {
                fills[name] = nil
                logger.info(
                    "auto-compaction started",
                    metadata: [
                        "bucket": "\(name)", "fragmentation": "\(data.fragmentation)",
                        "itemsUnusedPercent": "\(files.fill.map { "\($0.unusedPercent)" } ?? "not measured")",
                        "viewsFragmentation": "\(viewFigures.fragmentation)", "views": "\(includeViews)",
                    ])
            }
        }
    }
}
