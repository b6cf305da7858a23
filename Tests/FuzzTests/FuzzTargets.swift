import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import SetteeAuth
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeProtocol
import SetteeReplication
import SetteeStreams
import SetteeSubdoc
import SetteeTestSupport
import SetteeViews

@testable import SetteeAdmin
@testable import SetteeGateway
@testable import SetteeLite

/// The fuzz targets: each turns raw bytes into a call of one parser or router that takes bytes from
/// clients or peers. Errors are fine; a trap is a bug.
enum FuzzTargets {
    static func tokens(_ words: [String]) -> [[UInt8]] { words.map { Array($0.utf8) } }

    /// Memcached-binary frames as the KV port and DCP consumers decode them: the frame decoder with the
    /// node's body limit, then each section's parser (frame infos, DCP stream-request extras, the producer's
    /// DCP messages as both consumers decode them, a failover log value and the log it becomes).
    static let kvFrame = FuzzTarget(
        name: "kv-frame",
        dictionary: [[0x80], [0x81], [0x08], [0x18], [0x53], [0x54], [0x55], [0x56], [0x57], [0x58], [0x59], [0x60]]
    ) {
        input in
        var buffer = ByteBuffer(bytes: input)
        for _ in 0..<64 {
            guard let frame = try FrameDecoder.decode(&buffer, maxBodyLength: Limits.maxFrameBodySize) else { break }
            _ = try? FrameInfoParser.parse(frame.framingExtras)
            _ = DCPExtras.StreamRequest(frame.extras)
            _ = try? DCPMessage(frame, maxKeyLength: Limits.maxKeyLength)
            _ = RequestShape.accepts(frame, maxKeyLength: Limits.maxKeyLength)
            if let entries = readDCPFailoverLog(frame.value) {
                _ = FailoverLog(
                    validating: entries.map { FailoverEntry(uuid: VBucketUUID($0.uuid), seqno: SeqNo($0.seqno)) })
            }
        }
    }

    /// `JSON.parse`, and for what parses: serialisation parses back to the same text, and collation.
    static let json = FuzzTarget(
        name: "json",
        dictionary: tokens([
            "{", "}", "[", "]", ",", ":", "\"", "\\u", "\\ud83d\\ude00", "true", "false", "null", "1e308", "-1e-400",
            "1.7976931348623157e309", "[[[[[[[[[[[[[[[[", "\"\\\"\"",
        ])
    ) { input in
        let value = try JSON.parse(input)
        let text = value.serialized()
        let again = try JSON.parse(text)
        if again.serialized() != text { throw FuzzFinding("serialisation does not round-trip: \(value)") }
        _ = Collation.encode(value)
        _ = CanonicalJSON.bytes(value)
    }

    /// The multipart parser (`_bulk_get` answers, attachments with `follows`): the first line is the
    /// Content-Type, the rest the body.
    static let multipart = FuzzTarget(
        name: "multipart",
        dictionary: tokens([
            "\r\n", "--", "--b", "--b--", "\r\n\r\n", "Content-Type: application/json",
            "Content-Disposition: attachment",
            "boundary=", "multipart/mixed; boundary=b", "multipart/related; boundary=\"b\"", "Content-Encoding: gzip",
        ])
    ) { input in
        let (first, rest) = split(input)
        _ = try Multipart.parse(rest, contentType: String(decoding: first, as: UTF8.self))
    }

    /// Rev ids, `_revisions`, stored revision trees, and tree edits driven by the input.
    static let revs = FuzzTarget(
        name: "revs",
        dictionary: tokens([
            "\"revs\"", "\"parents\"", "\"deleted\"", "\"bodies\"", "\"start\"", "\"ids\"", "\"rev\"", "-1",
            "9007199254740991", "9007199254740992", "\"1-a\"", "\"2-b\"",
        ])
    ) { input in
        let text = String(decoding: input, as: UTF8.self)
        for line in text.split(separator: "\n").prefix(32) { _ = RevID(String(line)) }
        let json = try JSON.parse(input)
        if let tree = try? RevTree(json: json) {
            var t = tree
            _ = t.winner
            _ = t.revsDiff([RevID(generation: Limits.maxRevGeneration, digest: "z")])
            if let w = t.winner {
                _ = t.revisionsJSON(of: w)
                if let next = RevID.next(parent: w, deleted: false, body: .object([])) {
                    try? t.add(next, parent: w, deleted: false, body: nil)
                }
            }
            t.prune(revsLimit: 2)
            _ = try RevTree(json: t.json())
        }
        if let revText = json["rev"]?.stringValue, let rev = RevID(revText), let revisions = json["revisions"] {
            let history = try RevTree.parseRevisions(revisions, rev: rev)
            var tree = RevTree()
            try tree.addHistory(history, deleted: false, body: nil)
            _ = tree.winner
        }
    }

    /// The replication wire formats a Lite replicator or the gateway reads from a peer: `_changes`
    /// answers and rows, `_revs_diff` requests and answers, `_bulk_get` requests and answers, `open_revs`
    /// answers, checkpoints; then the rev ids and `_revisions` inside fetched revisions.
    static let replicationWire = FuzzTarget(
        name: "replication-wire",
        dictionary: tokens([
            "\"results\"", "\"last_seq\"", "\"seq\"", "\"id\"", "\"changes\"", "\"rev\"", "\"missing\"",
            "\"possible_ancestors\"", "\"docs\"", "\"ok\"", "\"error\"", "\"_revisions\"", "\"start\"", "\"ids\"",
            "\"session_id\"", "\"source_last_seq\"", "\"atts_since\"", "\"_attachments\"", "\"deleted\"",
        ])
    ) { input in
        let json = try JSON.parse(input)
        _ = try? ChangesBatch(json: json)
        _ = ChangeRow(json: json)
        _ = try? RevsDiff.parseRequest(json)
        _ = try? RevsDiff.parseAnswer(json)
        _ = try? BulkGet.parseRequest(json)
        _ = BulkGetRequest(json: json)
        _ = ReplicationCheckpoint(json: json)
        _ = try? BulkGet.parseOpenRevsJSON(json, id: "d")
        for fetched in (try? BulkGet.parseJSONAnswer(json)) ?? [] {
            if let rev = RevID(fetched.rev), let revisions = fetched.body["_revisions"] {
                _ = try? RevTree.parseRevisions(revisions, rev: rev)
            }
        }
    }

    /// The gateway's config file parser.
    static let gatewayConfig = FuzzTarget(
        name: "gateway-config",
        dictionary: tokens([
            "\"databases\"", "\"server\"", "\"walrus:\"", "\"bucket\"", "\"users\"", "\"GUEST\"", "\"sync\"", "`",
            "\"interface\"", "\":4984\"", "\"adminInterface\"", "\"CORS\"", "\"revs_limit\"", "\"log\"", "\"password\"",
        ])
    ) { input in
        _ = try GatewayConfig.parse(input)
    }

    /// The admin API's form bodies (urlencoded and flat JSON).
    static let form = FuzzTarget(
        name: "form", dictionary: tokens(["=", "&", "+", "%", "%2", "%zz", "%C3%A9", "ramQuotaMB", "{\"a\":1}"])
    ) { input in
        _ = try? FormBody.parse(input, contentType: "application/x-www-form-urlencoded")
        _ = try? FormBody.parse(input, contentType: "application/json")
    }

    /// The gateway's URL space and the view query parameters of the views port: the first line is a
    /// method and path, the rest a query string.
    static let routes = FuzzTarget(
        name: "routes",
        dictionary: tokens([
            "/", "//", "_all_docs", "_local", "_user", "_session", "%2F", "%", "skip=", "limit=", "keys=", "&",
            "group_level=", "connection_timeout=", "startkey=", "descending=true",
        ])
    ) { input in
        let (first, rest) = split(input)
        let line = String(decoding: first, as: UTF8.self)
        let parts = line.split(separator: " ", maxSplits: 1)
        let method = parts.first.map(String.init) ?? "GET"
        let path = parts.count > 1 ? String(parts[1]) : line
        for admin in [false, true] { _ = GatewayRoute.match(method: method, path: path, admin: admin) }
        let query = String(decoding: rest, as: UTF8.self)
        var params: [(String, String)] = []
        for pair in query.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = PercentEncoding.decode(String(kv[0])) ?? ""
            let value = kv.count > 1 ? PercentEncoding.decode(String(kv[1])) ?? "" : ""
            params.append((name, value))
        }
        let q = try ViewQuery.parse(params)
        _ = q.partial
        _ = q.partialParameters
        _ = LocalEndpoint.parseSince(query)
    }

    /// Sub-document requests as the KV port decodes and runs them (`SubdocRequest.decode`, then `execute` on a
    /// stored item). Input: a control byte (bit 0 a document exists, 1 it is a tombstone, 2 XATTR metadata is
    /// known, 3 the caller may read system XATTRs, 4 the stored value starts with an XATTR section), an opcode
    /// selector, an extras length (0-8) and the extras, a big-endian u16 length and the request's value, then the
    /// stored value. What is stored must read back: an XATTR section that `XattrBlob.split` takes, a body that is
    /// JSON when the write says so, macro slots inside the value; multi-path answers must parse. (`SubdocFuzzTests`
    /// generates body-only requests structurally; this target mutates whole requests and stored items, XATTRs too.)
    static let subdoc = FuzzTarget(
        name: "subdoc",
        dictionary: tokens([
            "$document", "$XTOC", "$vbucket", "_sync", "user", "a.b[0]", "[-1]", "\"${Mutation.CAS}\"",
            "\"${Mutation.seqno}\"", "\"${Mutation.value_crc32c}\"", "\"${x}\"", "`a.b`", "{\"a\":[1,2]}",
        ]) + [[0xc5], [0xc8], [0xcf], [0xd0], [0xd1], [0x04], [0x10], [0x00, 0x00, 0x00, 0x00]]
    ) { input in
        guard input.count >= 3 else { return }
        let control = input[0]
        let opcodes =
            [SubdocRequest.multiLookupOpcode, SubdocRequest.multiMutationOpcode]
            + SubdocCommand.allCases.map(\.rawValue)
        let opcode = opcodes[Int(input[1]) % opcodes.count]
        var rest = input.dropFirst(3)
        let extras = Array(rest.prefix(Int(input[2]) % 9))
        rest = rest.dropFirst(extras.count)
        let length = rest.count >= 2 ? Int(rest[rest.startIndex]) << 8 | Int(rest[rest.startIndex + 1]) : 0
        rest = rest.dropFirst(2)
        let value = Array(rest.prefix(length))
        let stored = Array(rest.dropFirst(value.count))
        guard let request = try? SubdocRequest.decode(opcode: opcode, extras: extras, value: value) else { return }

        var xattrs = XattrBlob()
        var body = stored
        if control & 0x10 != 0, let (blob, after) = XattrBlob.split(stored) {
            (xattrs, body) = (blob, after)
        }
        let deleted = control & 0x02 != 0
        let metadata = SubdocItemMetadata(
            cas: 0x1234_5678_9abc_def0, vbucketUUID: 42, seqno: 7, revSeqno: 3, expiry: 0, flags: 0x0200_0006,
            valueBytes: body.count, isJSON: (try? SubdocDocument(validating: body)) != nil, deleted: deleted,
            hlcNowNanoseconds: 1_800_000_000_000_000_000, hlcIsLogical: false, hasXattrs: !xattrs.pairs.isEmpty)
        let outcome = request.execute(
            on: control & 0x01 != 0 ? (deleted ? [] : body) : nil, metadata: control & 0x04 != 0 ? metadata : nil,
            xattrs: xattrs, deleted: deleted, privileges: control & 0x08 != 0 ? .all : [])

        switch outcome {
        case .write(let write, _):
            for macro in write.macros where macro.offset < 0 || write.value.count - macro.offset < MutationMacro.length
            {
                throw FuzzFinding("macro slot \(macro) outside a value of \(write.value.count) bytes")
            }
            var newBody = write.value
            if write.hasXattrs {
                guard let (_, after) = XattrBlob.split(write.value) else {
                    throw FuzzFinding("a write stores an XATTR section that does not read back")
                }
                newBody = after
            }
            if write.isJSON && !write.deleted
                && ((try? SubdocDocument(validating: newBody)) == nil || (try? JSON.parse(newBody)) == nil)
            {
                throw FuzzFinding("a write marked JSON stores a body that is not JSON")
            }
        case .remove(let keeping, let macros):
            if !keeping.isEmpty && XattrBlob.split(keeping) == nil {
                throw FuzzFinding("a delete keeps an XATTR section that does not read back")
            }
            for macro in macros where macro.offset < 0 || keeping.count - macro.offset < MutationMacro.length {
                throw FuzzFinding("macro slot \(macro) outside a kept section of \(keeping.count) bytes")
            }
        case .reply(let status, let answer):
            let failure = [SubdocRequest.multiPathFailureStatus, SubdocRequest.multiPathFailureDeletedStatus]
            if request.isMulti && !request.isMutation
                && (status == 0 || failure.contains(status)
                    || status == SubdocRequest.successDeletedStatus)
            {
                guard let results = SubdocRequest.lookupResults(answer), results.count == request.specs.count else {
                    throw FuzzFinding("a MULTI_LOOKUP answer does not parse into one result per spec")
                }
            }
            if request.isMulti && request.isMutation && failure.contains(status) {
                guard let (index, _) = SubdocRequest.mutationFailure(answer), index < request.specs.count else {
                    throw FuzzFinding("a MULTI_MUTATION failure does not name one of its specs")
                }
            }
        }
    }

    /// SCRAM-SHA-256 as the KV port's SASL runs it (`ScramServer`): the first line is `client-first`, the rest
    /// `client-final`, against user keys of password `scramPassword` (one iteration, so the loop stays fast) and
    /// against an unknown user (decoy keys). Findings: an unknown user authenticated, or a success whose proof is
    /// not the one the password gives for that exchange (computed here from RFC 5802's definitions).
    static let scramPassword = "fuzz-pw"
    static let scramSalt = Array("fuzz-salt".utf8)
    static let scramServerNonce = "srvnonce"
    static let scram = FuzzTarget(
        name: "scram",
        dictionary: tokens([
            "n,,", "y,,", "p=tls-unique,,", "n,a=Administrator,", "n=", "r=", "c=biws", ",p=", "=2C", "=3D", "m=",
            ",", "srvnonce", "\n",
        ])
    ) { input in
        let (first, final) = split(input)
        let hash = ScramHash.sha256
        let keys = ScramKeys.derive(password: scramPassword, salt: scramSalt, iterations: 1, hash: hash)
        for known in [true, false] {
            var server = ScramServer(hash: hash)
            guard
                case .challenge(let serverFirst) = server.receiveClientFirst(
                    first, keys: known ? keys : nil, decoy: keys, serverNonce: scramServerNonce),
                case .success(let username, _) = server.receiveClientFinal(final)
            else { continue }
            if !known { throw FuzzFinding("an unknown user authenticated as \(username)") }
            let firstText = String(decoding: first, as: UTF8.self)
            let finalText = String(decoding: final, as: UTF8.self)
            let gs2 = firstText.split(separator: ",", maxSplits: 2, omittingEmptySubsequences: false)
            guard gs2.count == 3, let p = finalText.range(of: ",p=", options: .backwards) else {
                throw FuzzFinding("a success without a client-first-bare or a proof")
            }
            let authMessage = Array(
                (gs2[2] + "," + String(decoding: serverFirst, as: UTF8.self) + "," + finalText[..<p.lowerBound]).utf8)
            let salted = hash.saltedPassword(Array(scramPassword.utf8), salt: scramSalt, iterations: 1)
            let clientKey = hash.hmac(key: salted, data: Array("Client Key".utf8))
            let signature = hash.hmac(key: hash.hash(clientKey), data: authMessage)
            // Bytes, not text: base64 ignores the unused low bits of a final character, so two spellings of the
            // one right proof both authenticate (the first sweep's 35 findings were such spellings).
            let proof = zip(clientKey, signature).map { $0 ^ $1 }
            if Data(base64Encoded: String(finalText[p.upperBound...])).map(Array.init) != proof {
                throw FuzzFinding("authenticated \(username) with a proof the password does not give")
            }
        }
    }

    /// Splits at the first newline.
    static func split(_ input: [UInt8]) -> ([UInt8], [UInt8]) {
        guard let nl = input.firstIndex(of: 0x0A) else { return (input, []) }
        return (Array(input[..<nl]), Array(input[(nl + 1)...]))
    }

    /// An HTTP request from bytes: `METHOD PATH` line, `Name: value` header lines, a blank line, the
    /// body. Path and header bytes are kept to what an HTTP/1 parser lets through (printable ASCII);
    /// the method is mapped into `methods`.
    static func request(_ input: [UInt8], methods: [HTTPRequest.Method]) -> (
        HTTPRequest.Method, String, HTTPFields, [UInt8]
    ) {
        let (first, afterFirst) = split(input)
        let line = first.filter { $0 > 0x20 && $0 < 0x7F || $0 == 0x20 }
        let parts = line.split(separator: 0x20, maxSplits: 1)
        let methodText = parts.first.map { String(decoding: $0, as: UTF8.self) } ?? "GET"
        let method =
            methods.first { $0.rawValue == methodText }
            ?? methods[Int(methodText.utf8.reduce(0) { $0 &+ Int($1) } & 0xFFFF) % methods.count]
        var path = parts.count > 1 ? String(decoding: parts[1].filter { $0 != 0x20 }, as: UTF8.self) : "/"
        if !path.hasPrefix("/") { path = "/" + path }
        var headers = HTTPFields()
        var rest = afterFirst
        while !rest.isEmpty {
            let (h, after) = split(rest)
            rest = after
            if h.isEmpty || h == [0x0D] { break }
            let clean = h.filter { $0 >= 0x20 && $0 < 0x7F }
            guard let colon = clean.firstIndex(of: UInt8(ascii: ":")),
                let name = HTTPField.Name(
                    String(decoding: clean[..<colon], as: UTF8.self).trimmingCharacters(in: .whitespaces))
            else { continue }
            headers.append(
                HTTPField(
                    name: name,
                    value: String(decoding: clean[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: .whitespaces)))
        }
        return (method, path, headers, rest)
    }
}
