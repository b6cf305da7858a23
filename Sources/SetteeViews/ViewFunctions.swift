import SetteeCore
import SetteeJS
import SetteeJSON
import SetteeStorage

/// One emitted row before it is stored: key and value as JSON text (what JSC's `JSON.stringify`
/// produced), the key's collation sort key.
struct EmittedRow {
    var view: Int
    var sortKey: [UInt8]
    var key: [UInt8]
    var value: [UInt8]
}

/// The compiled map functions of one design document, on one thread's `JSEngine`.
/// Not Sendable: lives on the thread that created it.
final class MapRunner {
    let engine: JSEngine
    private let functions: [JSFunction]
    /// Filled by the native `emit` during one `map` call.
    private var emitted: [(key: [UInt8]?, value: [UInt8]?)] = []
    private var emitError: JSError?

    init(views: [ViewDefinition], timeLimitSeconds: Double = Limits.jsCallTimeLimitSeconds) throws(ViewError) {
        engine = JSEngine(timeLimitSeconds: timeLimitSeconds)
        var fs: [JSFunction] = []
        for v in views {
            do { fs.append(try engine.compileFunction(v.map)) } catch {
                throw .invalidDesignDocument("Syntax error in the map function of the view `\(v.name)`: \(error)")
            }
        }
        functions = fs
        engine.register(name: "emit") { [unowned self] args throws(JSError) in
            guard self.emitted.count < Limits.maxViewRowsPerDocument else {
                throw .native("Too many (\(self.emitted.count + 1)) keys emitted for document")
            }
            self.emitted.append((try args.json(0), try args.json(1)))
        }
    }

    /// The `meta` argument Couchbase builds from a mutation (`couch_doc:to_full_ejson_meta`), plus
    /// `cas` (the issue asks for it; a JavaScript number, so exact only up to 2^53).
    static func metaJSON(id: [UInt8], meta: ItemMetadata, vb: VBucketID, isJSON: Bool) -> [UInt8] {
        var out: [UInt8] = Array(#"{"id":"#.utf8)
        JSON.writeString(String(decoding: id, as: UTF8.self), into: &out)
        let hex = String(meta.cas.rawValue, radix: 16)
        let exp = String(meta.expiry, radix: 16)
        let flags = String(meta.flags, radix: 16)
        let rev =
            "\(meta.revSeqno.rawValue)-" + String(repeating: "0", count: 16 - hex.count) + hex
            + String(repeating: "0", count: 8 - exp.count) + exp + String(repeating: "0", count: 8 - flags.count)
            + flags
        out.append(contentsOf: #","rev":""#.utf8)
        out.append(contentsOf: rev.utf8)
        out.append(contentsOf: #"","seq":""#.utf8)
        out.append(contentsOf: String(meta.bySeqno.rawValue).utf8)
        out.append(contentsOf: #"","vb":""#.utf8)
        out.append(contentsOf: String(vb.rawValue).utf8)
        out.append(contentsOf: #"","expiration":"#.utf8)
        out.append(contentsOf: String(meta.expiry).utf8)
        out.append(contentsOf: #","flags":"#.utf8)
        out.append(contentsOf: String(meta.flags).utf8)
        out.append(contentsOf: #","cas":"#.utf8)
        out.append(contentsOf: String(meta.cas.rawValue).utf8)
        out.append(contentsOf: #","type":""#.utf8)
        out.append(contentsOf: (isJSON ? "json" : "base64").utf8)
        out.append(contentsOf: #""}"#.utf8)
        return out
    }

    /// Runs every map function over one document: the rows of the views that succeeded, and the
    /// error of each view whose function failed (the caller logs it; that view gets no rows for the
    /// document, as Couchbase skips it, while the other views index it normally).
    func map(id: [UInt8], value: [UInt8], meta: ItemMetadata, vb: VBucketID) -> (
        rows: [EmittedRow], errors: [(view: Int, error: JSError)]
    ) {
        var rows: [EmittedRow] = []
        var errors: [(view: Int, error: JSError)] = []
        var docArg = JSArgument.json(value)
        var metaArg = JSArgument.json(Self.metaJSON(id: id, meta: meta, vb: vb, isJSON: true))
        views: for (i, f) in functions.enumerated() {
            emitted.removeAll(keepingCapacity: true)
            do {
                try engine.call(f, [docArg, metaArg])
            } catch JSError.invalidJSON {
                // Not JSON: Couchbase hands the body over base64-encoded with meta.type "base64".
                docArg = .string(Base64.encode(value))
                metaArg = .json(Self.metaJSON(id: id, meta: meta, vb: vb, isJSON: false))
                emitted.removeAll(keepingCapacity: true)
                do { try engine.call(f, [docArg, metaArg]) } catch {
                    errors.append((i, error))
                    continue views
                }
            } catch {
                errors.append((i, error))
                continue views
            }
            let start = rows.count
            for (k, v) in emitted {
                let keyJSON = k ?? Array("null".utf8)
                let valueJSON = v ?? Array("null".utf8)
                guard keyJSON.count <= Limits.maxViewKeySize, valueJSON.count <= Limits.maxViewValueSize,
                    let key = try? JSON.parse(keyJSON)
                else {
                    rows.removeSubrange(start...)
                    errors.append((i, .native("emitted key or value too large or not JSON")))
                    continue views
                }
                rows.append(EmittedRow(view: i, sortKey: Collation.encode(key), key: keyJSON, value: valueJSON))
            }
        }
        return (rows, errors)
    }
}
