import SetteeDocument
import SetteeJSON

/// One document as the application sees it: an id, the revision it was read at (the parent of the
/// next save), the user's properties (a JSON object without `_` members) and named attachments.
public struct Document: Sendable, Equatable {
    /// The document id; a new random id is chosen by `save` when nil.
    public var id: String?
    /// The revision this value was read at; nil for a new document. `save` creates a child of it.
    public var revision: RevID?
    /// The user's properties: a JSON object whose member names do not begin with `_`.
    public var properties: JSON
    /// Attachments by name. A `Blob` made with `Blob(data:contentType:)` is stored with the next save;
    /// one read from the database is kept by digest.
    public var attachments: [String: Blob]
    /// True for a tombstone (a deleted document's winning revision).
    public var isDeleted: Bool

    public init(
        id: String? = nil, properties: JSON = .object([]), attachments: [String: Blob] = [:]
    ) {
        self.id = id
        self.revision = nil
        self.properties = properties
        self.attachments = attachments
        self.isDeleted = false
    }

    init(id: String, revision: RevID, properties: JSON, attachments: [String: Blob], isDeleted: Bool) {
        self.id = id
        self.revision = revision
        self.properties = properties
        self.attachments = attachments
        self.isDeleted = isDeleted
    }

    /// A document from a CouchDB request body (`_id`, `_rev`, `_deleted`, `_attachments` with inline
    /// base64 `data`, `follows` bytes passed in `attachments` by name, or stubs of stored bytes).
    public init(couchBody json: JSON, attachments data: [String: [UInt8]] = [:]) throws(LiteError) {
        let body: DocumentBody
        do { body = try DocumentBody(json) } catch { throw .badRequest(error.reason) }
        self.init(id: body.id, properties: body.properties)
        revision = body.rev
        isDeleted = body.deleted
        for (name, entry) in body.attachments?.objectValue ?? [] {
            let type = entry["content_type"]?.stringValue ?? "application/octet-stream"
            if let inline = try? AttachmentInfo.decodeInline(entry, revpos: 0) {
                attachments[name] = Blob(data: inline.1, contentType: type)
            } else if entry["follows"]?.boolValue == true {
                guard let bytes = data[name] else { throw .badRequest("attachment \(name) follows but has no data") }
                attachments[name] = Blob(data: bytes, contentType: type)
            } else if let stub = Blob(stub: entry) {
                attachments[name] = stub
            } else {
                throw .badRequest("attachment \(name) has neither data nor digest")
            }
        }
    }

    /// A property of the body (nil when absent); setting nil removes it.
    public subscript(_ name: String) -> JSON? {
        get { properties[name] }
        set { properties.set(name, newValue) }
    }

    /// The `type` property, which object mapping and change notifications use.
    public var type: String? { properties["type"]?.stringValue }

    /// The body as stored and digested: properties, then `_attachments` stubs sorted by name.
    func storedBody(revpos: Int) -> JSON {
        // Without attachments the body is the properties themselves (no new object built per save).
        guard !attachments.isEmpty, case .object(var members) = properties else { return properties }
        let stubs = attachments.sorted { $0.key < $1.key }.map { name, blob in
            (name, blob.stubJSON(defaultRevpos: revpos))
        }
        members.append(("_attachments", .object(stubs)))
        return .object(members)
    }

    /// Splits a stored body into properties and attachments.
    static func fromStored(id: String, revision: RevID, body: JSON, deleted: Bool) -> Document {
        var props = body
        var atts: [String: Blob] = [:]
        if let a = body["_attachments"]?.objectValue {
            for (name, info) in a {
                if let blob = Blob(stub: info) { atts[name] = blob }
            }
            props.set("_attachments", nil)
        }
        if case .object = props {} else { props = .object([]) }
        return Document(id: id, revision: revision, properties: props, attachments: atts, isDeleted: deleted)
    }
}

/// An attachment: content type, length, digest, and (before its first save) the bytes themselves.
/// Bytes are stored once per digest however many revisions or documents name them; read them with
/// `Database.content(of:)`.
public struct Blob: Sendable, Equatable {
    public var contentType: String
    public var length: Int
    /// `sha1-<base64>`, the CouchDB attachment digest.
    public var digest: String
    /// The generation that added these bytes (0 until saved).
    public var revpos: Int
    /// Bytes still to be written (a new attachment); nil for one read from the database.
    public internal(set) var pendingData: [UInt8]?

    public init(data: [UInt8], contentType: String) {
        self.contentType = contentType
        self.length = data.count
        self.digest = AttachmentInfo.digest(of: data)
        self.revpos = 0
        self.pendingData = data
    }

    init(contentType: String, length: Int, digest: String, revpos: Int) {
        self.contentType = contentType
        self.length = length
        self.digest = digest
        self.revpos = revpos
        self.pendingData = nil
    }

    init?(stub: JSON) {
        guard let digest = stub["digest"]?.stringValue else { return nil }
        self.init(
            contentType: stub["content_type"]?.stringValue ?? "application/octet-stream",
            length: stub["length"]?.intValue ?? 0, digest: digest, revpos: stub["revpos"]?.intValue ?? 1)
    }

    func stubJSON(defaultRevpos: Int) -> JSON {
        let pos = pendingData != nil || revpos == 0 ? defaultRevpos : revpos
        return [
            "content_type": .string(contentType), "digest": .string(digest), "length": .number(Double(length)),
            "revpos": .number(Double(pos)), "stub": true,
        ]
    }
}
