import SetteeCore
import SetteeJS
import SetteeJSON
import SetteeStorage

/// One emitted row before it is stored: key and value as JSON text (what JSC's `JSON.stringify` produced) and
/// the key's collation sort key, as ranges of `MappedDocuments.bytes`.
struct MappedRow: Sendable {
    var view: Int
    var key: Range<Int>
    var value: Range<Int>
    var sortKey: Range<Int>
    /// The value when its JSON text is a number (the index's `num` column).
    var number: Double?
}

/// What the map functions made of a batch of change records: record `i`'s rows are `rows[ranges[i]]` in
/// the order they are numbered (`n`: view by view, each view's in emission order); a deletion has none.
struct MappedDocuments: Sendable {
    var ranges: [Range<Int>]
    var rows: [MappedRow] = []
    /// Every row's key, value and sort key bytes, one after the other.
    var bytes: [UInt8] = []
    /// The views whose function failed for a record (that view gets no rows from it, as Couchbase skips it;
    /// the other views index it normally).
    var errors: [(record: Int, view: Int, error: JSError)] = []

    init(count: Int) { ranges = Array(repeating: 0..<0, count: count) }
}

/// The compiled map functions of one design document, on one thread's `JSEngine`.
/// Not Sendable: lives on the thread that created it.
///
/// Documents are mapped in batches, one JavaScript call per batch (`MapDriver`): the documents cross as
/// strings and are parsed by `JSON.parse` in the script, rows come back as one string. What a document
/// gets is what one call per document and view gave before: its own parse of the text per view, a fresh
/// `meta`, the rows of a view dropped with an error when its function throws or emits a bad key, a text
/// `JSON.parse` refuses handed over base64-encoded with `meta.type` "base64", and the full time limit per
/// document and view: when the watchdog stops a batch, what it finished is kept, the document and view it
/// was in run again alone, and the batch goes on after it. (Only the order in which documents run across a
/// batch differs: the JSON ones first, then the others; it shows only to a function that keeps state
/// between calls.)
final class MapRunner {
    let engine: JSEngine
    private let functions: [JSFunction]
    private let driver: JSFunction
    /// The batch's meta objects as one JSON array text, rebuilt per batch.
    private var metas: [UInt8] = []

    init(
        views: [ViewDefinition], timeLimitSeconds: Double = Limits.jsCallTimeLimitSeconds,
        heapLimitBytes: Int = Limits.jsHeapMaxBytes
    ) throws(ViewError) {
        engine = JSEngine(timeLimitSeconds: timeLimitSeconds, heapLimitBytes: heapLimitBytes)
        // Before any user code runs, so the driver captures the real builtins.
        do { driver = try engine.compileFunction(MapDriver.source) } catch {
            throw .storage("the map driver did not compile: \(error)")
        }
        var fs: [JSFunction] = []
        for v in views {
            do { fs.append(try engine.compileFunction(v.map)) } catch {
                throw .invalidDesignDocument("Syntax error in the map function of the view `\(v.name)`: \(error)")
            }
        }
        functions = fs
    }

    /// The `meta` argument Couchbase builds from a mutation (`couch_doc:to_full_ejson_meta`), plus
    /// `cas` (the issue asks for it; a JavaScript number, so exact only up to 2^53).
    static func metaJSON(id: [UInt8], meta: ItemMetadata, vb: VBucketID, isJSON: Bool) -> [UInt8] {
        var out: [UInt8] = []
        appendMetaJSON(id: id, meta: meta, vb: vb, isJSON: isJSON, into: &out)
        return out
    }

    /// `metaJSON` appended to `out`, without allocating per field (it is built for every document indexed).
    static func appendMetaJSON(id: [UInt8], meta: ItemMetadata, vb: VBucketID, isJSON: Bool, into out: inout [UInt8]) {
        out.append(contentsOf: #"{"id":"#.utf8)
        let plain = id.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
        if plain {
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: id)
            out.append(UInt8(ascii: "\""))
        } else {
            JSON.writeString(String(decoding: id, as: UTF8.self), into: &out)
        }
        out.append(contentsOf: #","rev":""#.utf8)
        appendDecimal(meta.revSeqno.rawValue, into: &out)
        out.append(UInt8(ascii: "-"))
        appendHex(meta.cas.rawValue, width: 16, into: &out)
        appendHex(UInt64(meta.expiry), width: 8, into: &out)
        appendHex(UInt64(meta.flags), width: 8, into: &out)
        out.append(contentsOf: #"","seq":""#.utf8)
        appendDecimal(meta.bySeqno.rawValue, into: &out)
        out.append(contentsOf: #"","vb":""#.utf8)
        appendDecimal(UInt64(vb.rawValue), into: &out)
        out.append(contentsOf: #"","expiration":"#.utf8)
        appendDecimal(UInt64(meta.expiry), into: &out)
        out.append(contentsOf: #","flags":"#.utf8)
        appendDecimal(UInt64(meta.flags), into: &out)
        out.append(contentsOf: #","cas":"#.utf8)
        appendDecimal(meta.cas.rawValue, into: &out)
        out.append(contentsOf: #","type":""#.utf8)
        out.append(contentsOf: (isJSON ? "json" : "base64").utf8)
        out.append(contentsOf: #""}"#.utf8)
    }

    private static func appendDecimal(_ value: UInt64, into out: inout [UInt8]) {
        var count = 1
        var v = value
        while v >= 10 {
            v /= 10
            count += 1
        }
        out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: count))
        v = value
        var i = out.count
        repeat {
            i -= 1
            out[i] = UInt8(ascii: "0") + UInt8(v % 10)
            v /= 10
        } while v > 0
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// `value` in lowercase hex, zero-padded to `width` digits (wider values are written whole).
    private static func appendHex(_ value: UInt64, width: Int, into out: inout [UInt8]) {
        var count = 1
        while count < 16 && value >> (4 * UInt64(count)) != 0 { count += 1 }
        for _ in count..<max(count, width) { out.append(UInt8(ascii: "0")) }
        for k in stride(from: count - 1, through: 0, by: -1) {
            out.append(hexDigits[Int(value >> (4 * UInt64(k)) & 0xF)])
        }
    }

    /// Runs every map function over the live records of `records` (deletions get no rows).
    func map(_ records: [ChangeRecord], vb: VBucketID) -> MappedDocuments {
        var out = MappedDocuments(count: records.count)
        let live = records.indices.filter { !records[$0].meta.deleted }
        let refused = run(live, records, vb: vb, json: true, into: &out)
        if !refused.isEmpty { _ = run(refused, records, vb: vb, json: false, into: &out) }
        return out
    }

    /// Maps the records `docs` (indexes into `records`), batch after batch; returns those whose text is not
    /// JSON (only when `json`).
    private func run(
        _ docs: [Int], _ records: [ChangeRecord], vb: VBucketID, json: Bool, into out: inout MappedDocuments
    ) -> [Int] {
        var refused: [Int] = []
        var position = 0
        while position < docs.count {
            let batch = Array(docs[position..<min(docs.count, position + Limits.viewMapBatchDocuments)])
            let texts = batch.map { json ? records[$0].value : Array(Base64.encode(records[$0].value).utf8) }
            metas.removeAll(keepingCapacity: true)
            metas.append(UInt8(ascii: "["))
            for (k, r) in batch.enumerated() {
                if k > 0 { metas.append(UInt8(ascii: ",")) }
                Self.appendMetaJSON(id: records[r].key, meta: records[r].meta, vb: vb, isJSON: json, into: &metas)
            }
            metas.append(UInt8(ascii: "]"))
            let answer: [UInt8]
            var stopped = false
            do {
                answer = try call(functions, texts, json: json)
            } catch {
                // The watchdog (or an error outside any map function) stopped the batch: take what it finished.
                stopped = true
                answer = (try? engine.callForText(driver, [.number(0)])) ?? Array("0\t0".utf8)
            }
            let (done, at) = absorb(
                answer, batch: batch, views: Array(functions.indices), into: &out, refused: &refused)
            guard stopped || done == 0 else {
                position += done
                continue
            }
            if done >= batch.count {
                // Stopped after its last document was done.
                position += batch.count
                continue
            }
            // The document and view it stopped in run again alone, each view with the full time limit.
            let doc = batch[done]
            if refused.last != doc {
                let text = texts[done]
                metas.removeAll(keepingCapacity: true)
                metas.append(UInt8(ascii: "["))
                Self.appendMetaJSON(id: records[doc].key, meta: records[doc].meta, vb: vb, isJSON: json, into: &metas)
                metas.append(UInt8(ascii: "]"))
                for view in min(at, functions.count)..<functions.count {
                    do {
                        let one = try call([functions[view]], [text], json: json)
                        _ = absorb(one, batch: [doc], views: [view], into: &out, refused: &refused)
                    } catch {
                        out.errors.append((doc, view, error))
                    }
                    if refused.last == doc { break }
                }
            }
            position += done + 1
        }
        return refused
    }

    private func call(_ fns: [JSFunction], _ texts: [[UInt8]], json: Bool) throws(JSError) -> [UInt8] {
        try engine.callForText(
            driver,
            [
                .number(1), .functions(fns), .strings(texts), .string(String(decoding: metas, as: UTF8.self)),
                .bool(json), .number(Double(Limits.viewMapBatchMilliseconds)),
                .number(Double(Limits.viewMapBatchAnswerLength)),
            ])
    }

    /// Reads the driver's answer (`MapDriver`) into `out`: line `r`/`e`/`b` document numbers index `batch`,
    /// view numbers index `views`. Returns the header's documents done and view in progress.
    private func absorb(
        _ answer: [UInt8], batch: [Int], views: [Int], into out: inout MappedDocuments, refused: inout [Int]
    ) -> (done: Int, at: Int) {
        var lines = answer.split(separator: 0x0A, omittingEmptySubsequences: true)[...]
        guard let header = lines.popFirst() else { return (0, 0) }
        let head = header.split(separator: 0x09)
        let done = head.first.flatMap(Self.decimal) ?? 0
        let at = head.count > 1 ? Self.decimal(head[1]) ?? 0 : 0
        for line in lines {
            guard let kind = line.first else { continue }
            var fields = line.dropFirst().split(separator: 0x09, omittingEmptySubsequences: false)[...]
            guard let d = fields.popFirst().flatMap(Self.decimal), d < batch.count else { continue }
            let record = batch[d]
            if kind == UInt8(ascii: "b") {
                // Not JSON: whatever came before for it is void; it is mapped again base64-encoded.
                out.ranges[record] = 0..<0  // rows already kept for it stay unreferenced
                out.errors.removeAll { $0.record == record }
                refused.append(record)
                continue
            }
            guard let v = fields.popFirst().flatMap(Self.decimal), v < views.count else { continue }
            let view = views[v]
            if kind == UInt8(ascii: "e") {
                var message = "exception"
                if let text = fields.first, case .string(let m)? = try? JSON.parse(text) { message = m }
                out.errors.append((record, view, .exception(message)))
                continue
            }
            guard kind == UInt8(ascii: "r") else { continue }
            let first = out.ranges[record].isEmpty ? out.rows.count : out.ranges[record].lowerBound
            let rowsBefore = out.rows.count
            let bytesBefore = out.bytes.count
            var valid = fields.count % 2 == 0
            while valid, let key = fields.popFirst(), let value = fields.popFirst() {
                guard key.count <= Limits.maxViewKeySize, value.count <= Limits.maxViewValueSize,
                    let parsed = try? JSON.parse(key)
                else {
                    valid = false
                    break
                }
                let k = out.bytes.count
                out.bytes.append(contentsOf: key)
                let vStart = out.bytes.count
                out.bytes.append(contentsOf: value)
                let s = out.bytes.count
                Collation.encode(parsed, into: &out.bytes)
                out.rows.append(
                    MappedRow(
                        view: view, key: k..<vStart, value: vStart..<s, sortKey: s..<out.bytes.count,
                        number: IndexWriter.number(value)))
            }
            if !valid {
                out.rows.removeSubrange(rowsBefore...)
                out.bytes.removeSubrange(bytesBefore...)
                out.errors.append((record, view, .native("emitted key or value too large or not JSON")))
            }
            if out.rows.count > first { out.ranges[record] = first..<out.rows.count }
        }
        return (done, at)
    }

    /// A non-negative decimal number of at most 9 digits.
    private static func decimal(_ text: ArraySlice<UInt8>) -> Int? {
        guard !text.isEmpty, text.count <= 9 else { return nil }
        var n = 0
        for c in text {
            guard c >= 0x30 && c <= 0x39 else { return nil }
            n = n * 10 + Int(c - 0x30)
        }
        return n
    }
}
