import Foundation
import Hummingbird
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeStorage

/// Compaction and disk figures of a bucket (ADR 0154), on this node:
///
/// - `POST /pools/default/buckets/B/controller/compactBucket`: its data file, then its view index files, given back
///   their free pages in the background; 200 at once (as Couchbase), the run shown in `/pools/default/tasks`.
/// - `POST …/controller/compactDatabases`: the data file only. `POST …/controller/cancelBucketCompaction`: stops the
///   run after its current step (each step is whole on disk).
/// - `GET /pools/default/buckets/B/stats`: Couchbase's `op.samples` shape with one sample per stat: the disk figures
///   (`couch_docs_*`, `couch_views_*`), `curr_items` and `mem_used`.
///
/// A data node compacts and reports its own files; a cluster's nodes are asked one by one (Couchbase compacts every
/// node's files from one request: not done here, see the ADR).
enum CompactionRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.post("/pools/default/buckets/:name/controller/compactBucket") { _, c in
            await start(api, bucket: bucketParameter(c), includeViews: true)
        }
        router.post("/pools/default/buckets/:name/controller/compactDatabases") { _, c in
            await start(api, bucket: bucketParameter(c), includeViews: false)
        }
        router.post("/pools/default/buckets/:name/controller/cancelBucketCompaction") { _, c in
            guard let name = bucketParameter(c), api.registry.bucket(named: name) != nil else {
                return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
            }
            _ = api.compactions?.cancel(bucket: name)
            return AdminResponses.empty(.ok)
        }
        router.get("/pools/default/buckets/:name/stats") { _, c in
            guard let name = bucketParameter(c), let engine = api.registry.bucket(named: name) else {
                return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
            }
            let views = api.compactions?.views
            let body = await BlockingPool.run {
                statsJSON(
                    stats: engine.stats(), docs: engine.diskFigures() ?? DiskFigures(),
                    views: views?.diskFigures(bucket: name) ?? DiskFigures(),
                    nowMilliseconds: Int(Date().timeIntervalSince1970 * 1000)
                ).serialized()
            }
            return AdminResponses.bytes(.ok, body)
        }
    }

    private static func start(_ api: AdminAPI, bucket: String?, includeViews: Bool) async -> Response {
        guard let name = bucket, let engine = api.registry.bucket(named: name), let compactions = api.compactions else {
            return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
        }
        // A second request while one runs changes nothing (Couchbase answers it the same way).
        _ = await compactions.start(bucket: name, engine: engine, includeViews: includeViews)
        return AdminResponses.empty(.ok)
    }

    /// The stats document: `{"op":{"samples":{NAME:[VALUE]},"samplesCount":1,"isPersistent":true,"lastTStamp":MS,
    /// "interval":1000}}`, Couchbase's shape with its stat names, one (current) sample each.
    static func statsJSON(stats: EngineStats, docs: DiskFigures, views: DiskFigures, nowMilliseconds: Int) -> JSON {
        let samples: [(String, Int)] = [
            ("couch_docs_data_size", docs.dataSize), ("couch_docs_actual_disk_size", docs.actualDiskSize),
            ("couch_docs_fragmentation", docs.fragmentation), ("couch_views_data_size", views.dataSize),
            ("couch_views_actual_disk_size", views.actualDiskSize), ("couch_views_fragmentation", views.fragmentation),
            ("curr_items", stats.currItems), ("mem_used", stats.memUsed),
        ]
        return [
            "op": .object([
                ("samples", .object(samples.map { ($0.0, .array([.number(Double($0.1))])) })),
                ("samplesCount", 1), ("isPersistent", true),
                ("lastTStamp", .number(Double(nowMilliseconds))), ("interval", 1000),
            ])
        ]
    }
}
