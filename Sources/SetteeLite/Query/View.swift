import Foundation
import SetteeJSON

/// `emit(key, value)` as a map function receives it; a nil key or value is emitted as `null`.
public typealias EmitFunction = (_ key: JSON?, _ value: JSON?) -> Void

/// A view's map function: called once per live document's winning revision, in no particular order
/// and on the database's writer thread. It must be pure (same output for the same document) and must
/// not call back into the database.
public typealias MapFunction = @Sendable (_ document: Document, _ emit: EmitFunction) -> Void

/// A view's reduce: one of CouchDB's built-ins or a closure over the rows of one group.
public enum Reduce: Sendable {
    /// Number of rows.
    case count
    /// Sum of the numeric values (others count as 0).
    case sum
    /// `{"sum","count","min","max","sumsqr"}` of the numeric values.
    case stats
    /// `(keys, values) -> reduced value` over every row of a group (Lite reduces from the rows each
    /// time, so there is no re-reduce pass).
    case custom(@Sendable (_ keys: [JSON], _ values: [JSON]) -> JSON)

    func apply(keys: [JSON], values: [JSON]) -> JSON {
        switch self {
        case .count: return .number(Double(values.count))
        case .sum: return .number(values.reduce(0) { $0 + ($1.numberValue ?? 0) })
        case .stats:
            let ns = values.compactMap(\.numberValue)
            return [
                "sum": .number(ns.reduce(0, +)), "count": .number(Double(ns.count)),
                "min": .number(ns.min() ?? 0), "max": .number(ns.max() ?? 0),
                "sumsqr": .number(ns.reduce(0) { $0 + $1 * $1 }),
            ]
        case .custom(let f): return f(keys, values)
        }
    }
}

/// What `Database.view` registered: the index is rebuilt from scratch when `version` changes and
/// updated incrementally (documents changed since its last sequence) otherwise.
struct ViewDefinition: Sendable {
    var name: String
    var version: String
    var map: MapFunction
    var reduce: Reduce?
}

/// The view definitions registered in this process (the map closures cannot be stored on disk; the
/// index rows and the version they were built with are).
final class ViewRegistry: @unchecked Sendable {
    private let lock = NSLock()
    /// By collection row id, then view name (each collection has its own views).
    private var views: [Int64: [String: ViewDefinition]] = [:]

    func set(_ v: ViewDefinition, collection: Int64 = 0) {
        lock.lock()
        views[collection, default: [:]][v.name] = v
        lock.unlock()
    }

    func get(_ name: String, collection: Int64 = 0) -> ViewDefinition? {
        lock.lock()
        defer { lock.unlock() }
        return views[collection]?[name]
    }
}

/// A map/reduce view of one collection. Cheap to create; queries bring its index up to date first.
public struct View: Sendable {
    public var database: Database { collection.database }
    /// The collection whose documents the view maps (`FROM scope.collection`).
    public let collection: DatabaseCollection
    public let name: String
    public let version: String

    /// The definition registered for this view in this process.
    func definition() throws(LiteError) -> ViewDefinition {
        guard let def = database.registry.get(name, collection: collection.row.tables.id) else {
            throw .notFound("view \(name)")
        }
        return def
    }

    /// A query over this view; run it with `run()` or watch it with `live()`.
    public func query(
        startKey: JSON? = nil, endKey: JSON? = nil, keys: [JSON]? = nil, limit: Int? = nil, skip: Int = 0,
        descending: Bool = false, inclusiveEnd: Bool = true, reduce: Bool = true, group: Bool = false,
        groupLevel: Int = 0, includeDocs: Bool = false
    ) -> Query {
        Query(
            view: self,
            options: QueryOptions(
                startKey: startKey, endKey: endKey, keys: keys, limit: limit, skip: skip, descending: descending,
                inclusiveEnd: inclusiveEnd, reduce: reduce, group: group, groupLevel: groupLevel,
                includeDocs: includeDocs))
    }

    /// Brings the index up to date with the database now (queries do this themselves).
    public func updateIndex() throws(LiteError) {
        let def = try definition()
        _ = try database.withWriter(in: collection.row) { store in try store.updateView(def) }
    }
}

extension DatabaseCollection {
    /// Defines (or redefines) the view `name` over this collection: `map` is called with each live document and
    /// emits keys and values; `reduce` optionally folds them. Change `version` whenever `map` or `reduce`
    /// changes: the stored index is rebuilt when it differs from the one it was built with.
    public func view(
        _ name: String, version: String, reduce: Reduce? = nil, map: @escaping MapFunction
    ) -> View {
        database.registry.set(
            ViewDefinition(name: name, version: version, map: map, reduce: reduce), collection: row.tables.id)
        return View(collection: self, name: name, version: version)
    }

    /// A view of this collection defined earlier in this process, or nil.
    public func existingView(_ name: String) -> View? {
        database.registry.get(name, collection: row.tables.id).map {
            View(collection: self, name: $0.name, version: $0.version)
        }
    }
}

extension Database {
    /// A view over the default collection (`DatabaseCollection.view`).
    public func view(
        _ name: String, version: String, reduce: Reduce? = nil, map: @escaping MapFunction
    ) -> View {
        defaultCollectionHandle.view(name, version: version, reduce: reduce, map: map)
    }

    /// A view of the default collection defined earlier in this process, or nil.
    public func existingView(_ name: String) -> View? {
        defaultCollectionHandle.existingView(name)
    }
}
