/// Auto-compaction (ADR 0159): the cluster's settings (`/settings/autoCompaction`, Couchbase's names and defaults)
/// and the decision each node takes for each of its buckets at every check, as ns_server's compaction daemon does
/// (it looks every 30 s; `Limits.autoCompactionCheckSeconds`). Pure: the node's shell reads the figures, asks
/// `decide`, and performs what it answers (`BucketCompactions.start`, or a measure of the item pages' fill).
public enum AutoCompaction {
    /// `/settings/autoCompaction`: `databaseFragmentationThreshold` and `viewFragmentationThreshold`, each a
    /// percentage (2-100) and/or a size in bytes, nil for Couchbase's `"undefined"` (that trigger off); both
    /// undefined turns a file kind's auto-compaction off. Couchbase's defaults: 30 % for both, no size.
    public struct Settings: Sendable, Codable, Equatable, Hashable {
        public var databasePercentage: Int?
        public var databaseSize: Int?
        public var viewPercentage: Int?
        public var viewSize: Int?
        /// `parallelDBAndViewCompaction`: kept and shown; a node compacts one file at a time either way.
        public var parallelDBAndViewCompaction: Bool

        public init(
            databasePercentage: Int? = 30, databaseSize: Int? = nil, viewPercentage: Int? = 30, viewSize: Int? = nil,
            parallelDBAndViewCompaction: Bool = false
        ) {
            self.databasePercentage = databasePercentage
            self.databaseSize = databaseSize
            self.viewPercentage = viewPercentage
            self.viewSize = viewSize
            self.parallelDBAndViewCompaction = parallelDBAndViewCompaction
        }

        /// Couchbase's accepted percentages (`databaseFragmentationThreshold[percentage]`: 2-100).
        public static let percentages = 2...100
        /// Accepted sizes in bytes (the REST form's unit; couchbase-cli's `--compaction-db-size` takes MiB and sends
        /// bytes), at most 2^53 (exact in JSON).
        public static let sizes = 1...(1 << 53)

        /// The fields out of range, as `(form field, message)`; empty when the settings are valid.
        public var errors: [(String, String)] {
            var out: [(String, String)] = []
            func percentage(_ v: Int?, _ field: String) {
                if let v, !Self.percentages.contains(v) {
                    out.append((field, "The value must be an integer between 2 and 100"))
                }
            }
            func size(_ v: Int?, _ field: String) {
                if let v, !Self.sizes.contains(v) {
                    out.append((field, "The value must be a positive integer (bytes)"))
                }
            }
            percentage(databasePercentage, "databaseFragmentationThreshold[percentage]")
            size(databaseSize, "databaseFragmentationThreshold[size]")
            percentage(viewPercentage, "viewFragmentationThreshold[percentage]")
            size(viewSize, "viewFragmentationThreshold[size]")
            return out
        }
    }

    /// The item pages' fill as last measured (`BucketEngine.itemsUnusedPercent`, a walk of every page of the table:
    /// too dear for every check) and the data file's page count then.
    public struct Fill: Sendable, Equatable {
        public var unusedPercent: Int
        public var atPages: Int
        public init(unusedPercent: Int, atPages: Int) {
            self.unusedPercent = unusedPercent
            self.atPages = atPages
        }
    }

    /// What one check knows of one bucket on this node.
    public struct Files: Sendable, Equatable {
        public var data: DiskFigures
        public var views: DiskFigures
        /// nil until measured (and after a compaction, which changes it).
        public var fill: Fill?
        /// A compaction of this bucket runs (manual or automatic): nothing new starts.
        public var compacting: Bool
        public init(data: DiskFigures, views: DiskFigures = DiskFigures(), fill: Fill? = nil, compacting: Bool = false)
        {
            self.data = data
            self.views = views
            self.fill = fill
            self.compacting = compacting
        }
    }

    public enum Decision: Sendable, Equatable {
        /// Nothing due.
        case idle
        /// Measure the item pages' fill (the data file grew by `Limits.autoCompactionFillGrowthPercent` since the
        /// last measure, or it was never measured), then decide again with it.
        case measureFill
        /// Start a compaction of the bucket: its data file, and its view indexes when `views`.
        case compact(views: Bool, repackAtUnusedPercent: Int)
    }

    /// The decision for one bucket. The data file is due when its fragmentation reaches the percentage, where
    /// fragmentation is the larger of the free pages' share (`DiskFigures.fragmentation`) and the unused share of the
    /// item pages (`Fill`, space a repack gives back: ADR 0158), or when the bytes those two waste reach the size.
    /// The view indexes likewise by their free pages. Files smaller than `Limits.autoCompactionMinFileBytes` are
    /// never due (a new bucket's file is mostly fixed overhead).
    public static func decide(_ s: Settings, _ f: Files) -> Decision {
        if f.compacting { return .idle }
        let pageBytes = Self.pageBytes(f.data)
        let mainFileBytes = f.data.pages.multipliedReportingOverflow(by: pageBytes)
        let dataBig = !mainFileBytes.overflow && mainFileBytes.partialValue >= Limits.autoCompactionMinFileBytes
        let unused = f.fill?.unusedPercent ?? 0
        let freeBytes = f.data.freePages.multipliedReportingOverflow(by: pageBytes)
        let wasted =
            (freeBytes.overflow ? Int.max : freeBytes.partialValue)
            &+ f.data.dataSize / 100 * min(100, max(0, unused))
        let dataDue =
            dataBig
            && ((s.databasePercentage.map { max(f.data.fragmentation, unused) >= $0 } ?? false)
                || (s.databaseSize.map { wasted >= $0 } ?? false))
        let viewsFree = f.views.freePages.multipliedReportingOverflow(by: Self.pageBytes(f.views))
        let viewsDue =
            f.views.actualDiskSize >= Limits.autoCompactionMinFileBytes
            && ((s.viewPercentage.map { f.views.fragmentation >= $0 } ?? false)
                || (s.viewSize.map { viewsFree.overflow || viewsFree.partialValue >= $0 } ?? false))
        let repackAt = s.databasePercentage ?? Limits.compactionRepackUnusedPercent
        if dataDue || viewsDue { return .compact(views: viewsDue, repackAtUnusedPercent: repackAt) }
        // The fill can only have worsened while the file grew (a row rewritten in place changes no page count; one
        // that moved left room behind and took a new page), so it is measured again after growth, not every check.
        if dataBig, s.databasePercentage != nil || s.databaseSize != nil {
            guard let fill = f.fill else { return .measureFill }
            let (grown, overflow) = f.data.pages.subtractingReportingOverflow(fill.atPages)
            if !overflow, grown > 0, grown >= fill.atPages / 100 * Limits.autoCompactionFillGrowthPercent {
                return .measureFill
            }
        }
        return .idle
    }

    /// Bytes per page of `f`'s files: the bytes in use over the pages in use (0 when that says nothing).
    static func pageBytes(_ f: DiskFigures) -> Int {
        let (inUse, overflow) = f.pages.subtractingReportingOverflow(f.freePages)
        guard !overflow, inUse > 0, f.dataSize > 0 else { return 0 }
        return f.dataSize / inUse
    }
}
