import Crypto
import SetteeCore
import SetteeJSON

/// A document-level error (a body or attachment that fails validation), in CouchDB's vocabulary.
public typealias DocumentError = CouchError

/// One entry of a document's `_attachments`: the metadata kept with every revision. The bytes are
/// stored once per digest by whoever keeps the document.
public struct AttachmentInfo: Sendable, Equatable {
    public var contentType: String
    public var length: Int
    /// `"sha1-<base64 of the SHA-1>"`, as Sync Gateway and Couchbase Lite write it.
    public var digest: String
    /// The generation of the revision that added or last changed the attachment.
    public var revpos: Int
    /// True when the entry carries no data (a stub); in storage every entry is a stub.
    public var stub: Bool

    public init(contentType: String, length: Int, digest: String, revpos: Int, stub: Bool = true) {
        self.contentType = contentType
        self.length = length
        self.digest = digest
        self.revpos = revpos
        self.stub = stub
    }

    public static func digest(of data: [UInt8]) -> String {
        "sha1-" + Base64.encode(Array(Insecure.SHA1.hash(data: data)))
    }

    /// Parses a stub or `follows` entry (needs `digest`; `content_type` defaults to
    /// application/octet-stream). Inline `data` entries go through `decodeInline` instead.
    public init(json: JSON) throws(DocumentError) {
        guard case .object = json else { throw .badRequest("attachment must be an object") }
        guard let digest = json["digest"]?.stringValue, !digest.isEmpty else {
            throw .badRequest("attachment has neither data nor digest")
        }
        self.digest = digest
        contentType = json["content_type"]?.stringValue ?? "application/octet-stream"
        length = json["length"]?.intValue ?? 0
        revpos = json["revpos"]?.intValue ?? 0
        stub = json["stub"]?.boolValue ?? (json["follows"]?.boolValue != true)
    }

    /// An entry with inline base64 `data`: its metadata (digest and length computed) and bytes; nil
    /// when the entry has no `data`.
    public static func decodeInline(_ json: JSON, revpos: Int) throws(DocumentError) -> (AttachmentInfo, [UInt8])? {
        guard let text = json["data"]?.stringValue else { return nil }
        guard let bytes = Base64.decode(text, .skippingUnknown) else {
            throw .badRequest("Invalid base64 in attachment")
        }
        let info = AttachmentInfo(
            contentType: json["content_type"]?.stringValue ?? "application/octet-stream", length: bytes.count,
            digest: digest(of: bytes), revpos: revpos)
        return (info, bytes)
    }

    /// The `_attachments` entry: a stub (`"stub":true`), or with `data` inline when `data` is given, or
    /// `"follows":true` for a multipart part.
    public func json(stub: Bool = true, data: [UInt8]? = nil, follows: Bool = false) -> JSON {
        var members: [(String, JSON)] = [
            ("content_type", .string(contentType)), ("digest", .string(digest)),
            ("length", .number(Double(length))), ("revpos", .number(Double(revpos))),
        ]
        if let data {
            members.append(("data", .string(Base64.encode(data))))
        } else if follows {
            members.append(("follows", .bool(true)))
        } else if stub {
            members.append(("stub", .bool(true)))
        }
        return .object(members)
    }
}
