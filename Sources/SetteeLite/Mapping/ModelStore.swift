import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON

/// A `Codable` type stored as documents whose `type` property is `documentType` (seed 004's object
/// store on top of a document database). Encoding goes through Foundation's JSON coder: mapping is
/// app-facing convenience, not a hot path.
public protocol DocumentModel: Codable, Sendable {
    static var documentType: String { get }
}

/// A to-one relation: the id of a `Target` document, encoded as that id string.
public struct Reference<Target: DocumentModel>: Codable, Sendable, Hashable {
    public var id: String
    public init(_ id: String) { self.id = id }
    public init(from decoder: any Decoder) throws { id = try decoder.singleValueContainer().decode(String.self) }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(id)
    }
}

/// A model read from (or saved to) the database, with the document identity needed to update it.
public struct Stored<Model: DocumentModel>: Sendable {
    public var id: String
    public var revision: RevID
    public var model: Model
    /// A reference to this object, for another model's to-one relation.
    public var reference: Reference<Model> { Reference(id) }
}

/// Which objects of one model type a committed transaction inserted, updated or deleted.
public struct ObjectChanges: Sendable, Equatable {
    public var inserted: [String] = []
    public var updated: [String] = []
    public var deleted: [String] = []
    /// True when a replicator made the change.
    public var isExternal = false
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }
}

/// Maps `DocumentModel` values onto a database: typed saves and fetches, predicate queries, to-one and
/// to-many relations (to-many through a view keyed by the referencing property), change notifications.
public struct ModelStore: Sendable {
    public let database: Database

    public init(database: Database) { self.database = database }

    // MARK: Encoding

    static func encode<M: DocumentModel>(_ model: M) throws(LiteError) -> JSON {
        let data: Data
        do { data = try JSONEncoder().encode(model) } catch {
            throw .badRequest("cannot encode \(M.self): \(error)")
        }
        guard case .object(var members) = (try? JSON.parse([UInt8](data), maxValues: Limits.liteMaxJSONValues)) ?? .null
        else {
            throw .badRequest("\(M.self) does not encode as a JSON object")
        }
        members.removeAll { $0.0 == "type" }
        members.insert(("type", .string(M.documentType)), at: 0)
        return .object(members)
    }

    static func decode<M: DocumentModel>(_ type: M.Type, _ doc: Document) throws(LiteError) -> Stored<M> {
        guard let id = doc.id, let rev = doc.revision else { throw .badRequest("document without identity") }
        do {
            let model = try JSONDecoder().decode(M.self, from: Data(doc.properties.serialized()))
            return Stored(id: id, revision: rev, model: model)
        } catch {
            throw .badRequest("document \(id) does not decode as \(M.self): \(error)")
        }
    }

    // MARK: Writes

    /// Inserts `model` as a new document (random id unless given).
    public func insert<M: DocumentModel>(_ model: M, id: String? = nil) throws(LiteError) -> Stored<M> {
        let saved = try database.put(Document(id: id, properties: try Self.encode(model)))
        return Stored(id: saved.id!, revision: saved.revision!, model: model)
    }

    /// Saves `stored.model` as the next revision of `stored` (409 when someone else changed it since).
    /// Attachments of the document are kept.
    public func update<M: DocumentModel>(_ stored: Stored<M>) throws(LiteError) -> Stored<M> {
        guard var doc = try database.document(stored.id, revision: stored.revision) else {
            throw .notFound(stored.id)
        }
        doc.properties = try Self.encode(stored.model)
        let saved = try database.put(doc)
        return Stored(id: stored.id, revision: saved.revision!, model: stored.model)
    }

    public func delete<M: DocumentModel>(_ stored: Stored<M>) throws(LiteError) {
        try database.delete(stored.id, revision: stored.revision)
    }

    // MARK: Fetches

    /// The object `id`, nil when absent, deleted or of another type.
    public func fetch<M: DocumentModel>(_ type: M.Type, id: String) throws(LiteError) -> Stored<M>? {
        guard let doc = try database.document(id), doc.type == M.documentType else { return nil }
        return try Self.decode(type, doc)
    }

    /// Follows a to-one relation.
    public func fetch<M: DocumentModel>(_ reference: Reference<M>) throws(LiteError) -> Stored<M>? {
        try fetch(M.self, id: reference.id)
    }

    /// Every object of type `M` (through the `type` view) that `predicate` accepts, in id order.
    public func fetchAll<M: DocumentModel>(
        _ type: M.Type, where predicate: (M) -> Bool = { _ in true }
    ) throws(LiteError) -> [Stored<M>] {
        let rows = try typeView().query(keys: [.string(M.documentType)], includeDocs: true).run()
        var out: [Stored<M>] = []
        for row in rows {
            guard let doc = row.document else { continue }
            let s = try Self.decode(type, doc)
            if predicate(s.model) { out.append(s) }
        }
        return out
    }

    /// Objects of type `M` whose `property` (a `Reference` or an array of them) names `id`: the
    /// to-many side of a relation, answered from a view on `(property value)`.
    public func related<M: DocumentModel>(
        _ type: M.Type, via property: String, to id: String
    ) throws(LiteError) -> [Stored<M>] {
        let view = database.view("_rel/\(M.documentType)/\(property)", version: "1") { doc, emit in
            guard doc.type == M.documentType else { return }
            switch doc[property] {
            case .string(let target): emit(.string(target), nil)
            case .array(let items): for case .string(let target) in items { emit(.string(target), nil) }
            default: break
            }
        }
        let rows = try view.query(keys: [.string(id)], includeDocs: true).run()
        var out: [Stored<M>] = []
        var seen = Set<String>()
        for row in rows {
            guard let doc = row.document, let docID = doc.id, seen.insert(docID).inserted else { continue }
            out.append(try Self.decode(type, doc))
        }
        return out
    }

    func typeView() -> View {
        database.view("_types", version: "1") { doc, emit in
            if let t = doc.type { emit(.string(t), nil) }
        }
    }

    // MARK: Changes

    /// Committed changes to objects of type `M`, one element per transaction that touched any.
    public func changes<M: DocumentModel>(of type: M.Type) -> AsyncStream<ObjectChanges> {
        let source = database.changes
        return AsyncStream { continuation in
            let task = Task {
                for await change in source {
                    var c = ObjectChanges(isExternal: change.isExternal)
                    for d in change.documents where d.type == M.documentType {
                        if d.isDeleted || d.isPurged {
                            c.deleted.append(d.id)
                        } else if d.isNew {
                            c.inserted.append(d.id)
                        } else {
                            c.updated.append(d.id)
                        }
                    }
                    if !c.isEmpty { continuation.yield(c) }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
