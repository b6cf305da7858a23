/// The disk figures Couchbase reports per bucket for its data files (`couch_docs_*`) and its view indexes
/// (`couch_views_*`), for one file or summed over several (ADR 0154).
///
/// - `dataSize`: bytes of the pages in use (`couch_docs_data_size`: what the data would take once compacted).
/// - `actualDiskSize`: bytes the files take on disk, write-ahead logs included (`couch_docs_actual_disk_size`).
/// - `fragmentation`: the free pages' share of the files' pages, in whole percent, 0-100
///   (`couch_docs_fragmentation`). Computed over pages, not over `actualDiskSize`, so a WAL not yet checkpointed
///   does not count as fragmentation.
public struct DiskFigures: Sendable, Equatable {
    public var dataSize: Int
    public var actualDiskSize: Int
    /// Pages in the files and, of those, free ones (the base of `fragmentation`).
    public var pages: Int
    public var freePages: Int

    public init(dataSize: Int = 0, actualDiskSize: Int = 0, pages: Int = 0, freePages: Int = 0) {
        self.dataSize = dataSize
        self.actualDiskSize = actualDiskSize
        self.pages = pages
        self.freePages = freePages
    }

    /// Whole percent of free pages (0 for no pages); rounded down.
    public var fragmentation: Int {
        guard pages > 0 else { return 0 }
        let (scaled, overflow) = max(0, freePages).multipliedReportingOverflow(by: 100)
        guard overflow else { return min(100, scaled / pages) }
        return Int(min(100, Double(freePages) * 100 / Double(pages)))
    }

    /// The figures of two sets of files together (sums saturate).
    public static func + (a: DiskFigures, b: DiskFigures) -> DiskFigures {
        func add(_ x: Int, _ y: Int) -> Int {
            let (s, o) = x.addingReportingOverflow(y)
            return o ? Int.max : s
        }
        return DiskFigures(
            dataSize: add(a.dataSize, b.dataSize), actualDiskSize: add(a.actualDiskSize, b.actualDiskSize),
            pages: add(a.pages, b.pages), freePages: add(a.freePages, b.freePages))
    }
}
