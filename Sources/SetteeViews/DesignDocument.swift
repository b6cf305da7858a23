import SetteeCore
import SetteeJSON

/// A reduce function: one of Couchbase's built-ins or custom JavaScript.
public enum ReduceFunction: Sendable, Equatable {
    case count
    case sum
    case stats
    case javascript(String)

    /// Parses the `reduce` member: `_count`, `_sum`, `_stats` or JavaScript source.
    public init(source: String) throws(ViewError) {
        let trimmed = source.trimmingWhitespace()
        switch trimmed {
        case "_count": self = .count
        case "_sum": self = .sum
        case "_stats": self = .stats
        default:
            if trimmed.hasPrefix("_") {
                throw .invalidDesignDocument("Invalid builtin reduce function: \(trimmed)")
            }
            self = .javascript(source)
        }
    }

    var source: String {
        switch self {
        case .count: return "_count"
        case .sum: return "_sum"
        case .stats: return "_stats"
        case .javascript(let s): return s
        }
    }
}

/// One view of a design document.
public struct ViewDefinition: Sendable, Equatable {
    public var name: String
    public var map: String
    public var reduce: ReduceFunction?
}

/// A design document (`_design/NAME`): views with map and optional reduce functions.
///
/// Stored as the JSON the user sent (so `GET` returns it as written); `views` are parsed from it.
/// Names starting with `dev_` are development views: Settee indexes them over the same vBuckets as
/// production ones (Couchbase indexes one vBucket per node for them; documented in docs/internals/views.md).
public struct DesignDocument: Sendable, Equatable {
    /// The name without the `_design/` prefix.
    public var name: String
    public var views: [ViewDefinition]
    /// The body as sent (compact JSON).
    public var body: [UInt8]

    public var id: String { "_design/" + name }
    public var isDevelopment: Bool { name.hasPrefix("dev_") }

    /// Parses and validates a design document body. JavaScript is compiled separately
    /// (`ViewFunctions.validate`), because compiling needs a `JSEngine` on the caller's thread.
    public init(name: String, body: [UInt8]) throws(ViewError) {
        guard !name.isEmpty, name.utf8.count <= Limits.maxKeyLength else {
            throw .invalidDesignDocument("invalid design document name")
        }
        let json: JSON
        do { json = try JSON.parse(body) } catch { throw .badRequest("invalid UTF-8 JSON: \(error.reason)") }
        guard case .object = json else { throw .badRequest("Document must be a JSON object") }
        var views: [ViewDefinition] = []
        if let v = json["views"] {
            guard case .object(let members) = v else {
                throw .invalidDesignDocument("`views` field must be an object")
            }
            guard members.count <= Limits.maxViewsPerDesignDocument else {
                throw .invalidDesignDocument("too many views (limit \(Limits.maxViewsPerDesignDocument))")
            }
            for (viewName, def) in members {
                guard case .object = def else {
                    throw .invalidDesignDocument("View `\(viewName)` must be an object")
                }
                guard let map = def["map"]?.stringValue else {
                    throw .invalidDesignDocument("View `\(viewName)` must have a `map` string")
                }
                var reduce: ReduceFunction? = nil
                if let r = def["reduce"] {
                    guard let source = r.stringValue else {
                        throw .invalidDesignDocument("View `\(viewName)` has a non-string reduce")
                    }
                    reduce = try ReduceFunction(source: source)
                }
                views.append(ViewDefinition(name: viewName, map: map, reduce: reduce))
            }
        }
        if let s = json["spatial"], case .object(let m) = s, !m.isEmpty {
            throw .invalidDesignDocument("spatial views are not supported")
        }
        self.name = name
        self.views = views
        self.body = json.serialized()
    }

    /// What the index depends on: a change of any map or reduce rebuilds the design document's index.
    public var signature: UInt32 {
        var bytes: [UInt8] = []
        for v in views {
            bytes.append(contentsOf: v.name.utf8)
            bytes.append(0)
            bytes.append(contentsOf: v.map.utf8)
            bytes.append(0)
            bytes.append(contentsOf: (v.reduce?.source ?? "").utf8)
            bytes.append(0)
        }
        return CRC32.checksum(bytes)
    }
}

extension String {
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}
