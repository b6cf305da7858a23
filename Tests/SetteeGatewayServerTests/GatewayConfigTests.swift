import Foundation
import SetteeGateway
import SetteeJSON
import Testing

/// The seeds' config files, read from Tests/GatewayFixtures.
enum Fixtures {
    static func bytes(_ name: String) throws -> [UInt8] {
        var url = URL(fileURLWithPath: #filePath)
        url.deleteLastPathComponent()
        url.deleteLastPathComponent()
        return Array(try Data(contentsOf: url.appendingPathComponent("GatewayFixtures/\(name)")))
    }
}

@Suite struct BackquotedJSONTests {
    @Test func backquotedStringBecomesAJSONStringWithEscapes() throws {
        // Proves a backquoted string with quotes, backslashes, newlines and tabs becomes the exact same
        // text as a JSON string, and ordinary strings (even with backquotes inside) are untouched.
        let input = Array("{\"a\": `x \"q\" \\ y\n\tz`, \"b\": \"has ` inside\", \"c\": \"esc \\\" `\"}".utf8)
        let json = try JSON.parse(try BackquotedJSON.convert(input))
        #expect(json["a"]?.stringValue == "x \"q\" \\ y\n\tz")
        #expect(json["b"]?.stringValue == "has ` inside")
        #expect(json["c"]?.stringValue == "esc \" `")
    }

    @Test func unterminatedBackquoteIsAnErrorAtItsOffset() {
        // Proves an opening backquote that is never closed is reported with its byte offset.
        #expect(throws: BackquoteError(offset: 6)) { try BackquotedJSON.convert(Array("{\"a\": `abc".utf8)) }
    }

    @Test func controlCharactersAreEscaped() throws {
        // Proves a raw control byte inside backquotes is written as a \u00XX escape the JSON parser accepts.
        let json = try JSON.parse(try BackquotedJSON.convert([UInt8(ascii: "`"), 0x01, UInt8(ascii: "`")]))
        #expect(json.stringValue == "\u{01}")
    }
}

@Suite struct GatewayConfigTests {
    @Test func sharedBucketAccessIsOnUnlessTheConfigSaysFalse() throws {
        // Proves issue 67 item 11: a database whose config does not name `enable_shared_bucket_access` keeps its
        // metadata in the `_sync` XATTR (Sync Gateway 3.0's default), and `false` still chooses the 1.x layout.
        // Before, leaving it out meant the 1.x layout, and SDK users of `cluster/up`'s bucket found `_sync` in
        // their values.
        func shared(_ field: String) throws -> Bool? {
            let text = #"{"databases":{"db":{"server":"walrus:"\#(field)}}}"#
            return try GatewayConfig.parse(Array(text.utf8)).databases.first?.sharedBucketAccess
        }
        #expect(try shared("") == true)
        #expect(try shared(#","enable_shared_bucket_access":true"#) == true)
        #expect(try shared(#","enable_shared_bucket_access":false"#) == false)
        // Seed 000's published config, which predates the flag, now runs with shared access.
        #expect(
            try GatewayConfig.parse(try Fixtures.bytes("seed000-config.json")).databases.first?.sharedBucketAccess
                == true)
    }

    @Test func purgeSettingsAndTheRevsLimitFloorFollowSyncGateway() throws {
        // Proves issue 71's settings: `revs_limit` below 20 is taken only with `allow_conflicts: false`;
        // `meta_purge_interval` (fractional days) and `compact_interval_days` are read, with the bucket's interval
        // (nil here) and one day as defaults, and reach the database's options.
        func db(_ fields: String) throws -> DatabaseConfig {
            let text = #"{"databases":{"db":{"server":"walrus:"\#(fields)}}}"#
            return try #require(try GatewayConfig.parse(Array(text.utf8)).databases.first)
        }
        #expect(try db(#","revs_limit":5,"allow_conflicts":false"#).revsLimit == 5)
        #expect(try db(#","revs_limit":20"#).revsLimit == 20)
        let plain = try db("")
        #expect(plain.metaPurgeIntervalDays == nil && plain.compactIntervalDays == 1)
        let set = try db(#","meta_purge_interval":0.5,"compact_interval_days":2"#)
        #expect(set.metaPurgeIntervalDays == 0.5 && set.compactIntervalDays == 2)
        let options = DatabaseOptions(config: set)
        #expect(options.metaPurgeIntervalDays == 0.5 && options.compactIntervalSeconds == 2 * 86_400)
    }

    @Test func localDocExpiryFollowsSyncGateway() throws {
        // Proves `local_doc_expiry_secs` (ADR 0151): 90 days unless given, read in seconds into the database's
        // options, refused when below 1 or past `Limits.gatewayMaxLocalDocExpirySeconds`.
        func db(_ fields: String) throws -> DatabaseConfig {
            let text = #"{"databases":{"db":{"server":"walrus:"\#(fields)}}}"#
            return try #require(try GatewayConfig.parse(Array(text.utf8)).databases.first)
        }
        #expect(try db("").localDocExpirySeconds == 90 * 86_400)
        let set = try db(#","local_doc_expiry_secs":3600"#)
        #expect(DatabaseOptions(config: set).localDocExpirySeconds == 3600)
        #expect(throws: ConfigError.self) { try db(#","local_doc_expiry_secs":0"#) }
        #expect(throws: ConfigError.self) { try db(#","local_doc_expiry_secs":999999999999"#) }
    }

    @Test func seed000LoadsUnchanged() throws {
        // Proves seed 000's config (backquoted sync function, cluster server, GUEST with "*") parses with
        // every field where Sync Gateway would put it.
        let config = try GatewayConfig.parse(try Fixtures.bytes("seed000-config.json"))
        #expect(config.interface == ListenAddress(host: "0.0.0.0", port: 4984))
        #expect(config.adminInterface == ListenAddress(host: "0.0.0.0", port: 4985))
        #expect(config.log == ["CRUD+", "REST+", "Changes+", "Attach+"])
        #expect(config.databases.count == 1)
        let db = try #require(config.databases.first)
        #expect(db.name == "demo")
        #expect(db.bucket == "demo")
        #expect(db.server == .cluster("http://localhost:8091"))
        #expect(db.sync == "function(doc) {channel(doc.channels);}")
        #expect(db.users.map(\.name) == ["GUEST"])
        #expect(db.users.first?.body["admin_channels"] == .array([.string("*")]))
        #expect(db.revsLimit == 1000)
    }

    @Test(arguments: ["seed001-config.json", "seed001-config-as-published.json"])
    func seed001LoadsUnchanged(file: String) throws {
        // Proves seed 001's config (walrus server, users, CORS, `unsupported`, a long backquoted sync
        // function) parses, both as published on one line and with its line breaks restored.
        let config = try GatewayConfig.parse(try Fixtures.bytes(file))
        #expect(config.interface == GatewayConfig.defaultInterface)
        #expect(config.adminInterface == ListenAddress(host: "127.0.0.1", port: 4985))
        #expect(config.cors?.origin == ["*"])
        #expect(config.logsRequests)
        let db = try #require(config.databases.first)
        #expect(db.server == .walrus)
        #expect(db.bucket == "default")
        #expect(db.users.map(\.name) == ["GUEST", "joe", "jane"])
        #expect(db.unsupported != nil)
        #expect(db.sync?.contains("requireUser(docOwner);") == true)
        #expect(db.sync?.contains("throw({forbidden: \"Cannot change tag of document\"});") == true)
    }

    @Test(arguments: [
        ("{\"databases\":{\"demo\":{\"revs_limt\":5}}}", "databases.demo.revs_limt: unknown field"),
        ("{\"interfase\":\":1\"}", "interfase: unknown field"),
        ("{\"databases\":{\"demo\":{\"revs_limit\":\"5\"}}}", "databases.demo.revs_limit: must be an integer"),
        (
            "{\"databases\":{\"demo\":{\"revs_limit\":0}}}",
            "databases.demo.revs_limit: must be between 1 and 2147483647"
        ),
        (
            "{\"databases\":{\"demo\":{\"revs_limit\":19}}}",
            "databases.demo.revs_limit: The revs_limit (19) value cannot be set lower than 20 while allow_conflicts is true"
        ),
        (
            "{\"databases\":{\"demo\":{\"meta_purge_interval\":0}}}",
            "databases.demo.meta_purge_interval: must be more than 0 days"
        ),
        (
            "{\"databases\":{\"demo\":{\"compact_interval_days\":0.01}}}",
            "databases.demo.compact_interval_days: must be between 0.04 and 60.0"
        ),
        (
            "{\"interface\":\"localhost:99999\"}",
            "interface: must be host:port with a port 0-65535, got \"localhost:99999\""
        ),
        ("{\"CORS\":{\"Origins\":[\"*\"]}}", "CORS.Origins: unknown field"),
        (
            "{\"databases\":{\"demo\":{\"users\":{\"jo\":{\"pasword\":\"x\"}}}}}",
            "databases.demo.users.jo.pasword: unknown field"
        ),
        (
            "{\"databases\":{\"demo\":{\"server\":\"ftp://x\"}}}",
            "databases.demo.server: must be \"walrus:\", a directory path or http://host:8091, got \"ftp://x\""
        ),
        (
            "{\"databases\":{\"Demo\":{}}}",
            "databases.Demo: invalid database name (lowercase letters, digits and _$()+-/, starting with a letter)"
        ),
        (
            "{\"databases\":{\"demo\":{\"import_docs\":1}}}",
            "databases.demo.import_docs: must be true, false or \"continuous\""
        ),
        ("{\"log\": [1]}", "log[0]: must be a string"),
        ("[]", "must be an object"),
        ("{\"sync\": `abc}", "unterminated backquoted string starting at byte 9"),
    ])
    func invalidConfigNamesThePath(text: String, message: String) {
        // Proves each invalid or unknown field is reported with its dotted path and what is wrong.
        #expect(throws: (any Error).self) { try GatewayConfig.parse(Array(text.utf8)) }
        do {
            _ = try GatewayConfig.parse(Array(text.utf8))
        } catch {
            #expect(error.description == message)
        }
    }

    @Test func keysMatchCaseInsensitivelyAndDefaultsApply() throws {
        // Proves `AdminInterface`/`cors` match case-insensitively (as Go's decoder does) and that a
        // database without server/bucket gets walrus and its own name.
        let text =
            "{\"AdminInterface\":\"127.0.0.1:5000\",\"cors\":{\"origin\":\"http://a\",\"MaxAge\":60},"
            + "\"databases\":{\"db\":{\"import_docs\":\"continuous\",\"server\":\"walrus:/tmp/x\"}}}"
        let config = try GatewayConfig.parse(Array(text.utf8))
        #expect(config.adminInterface == ListenAddress(host: "127.0.0.1", port: 5000))
        #expect(config.cors == CORSConfig(origin: ["http://a"], maxAge: 60))
        let db = try #require(config.databases.first)
        #expect(db.bucket == "db")
        #expect(db.server == .directory("/tmp/x"))
        #expect(db.importDocs)
        #expect(db.allowConflicts)
    }

    @Test func listenAddressForms() throws {
        // Proves the address forms Sync Gateway configs use parse to host and port.
        #expect(try ListenAddress.parse(":4984", path: "i") == ListenAddress(host: "0.0.0.0", port: 4984))
        #expect(try ListenAddress.parse("[::1]:80", path: "i") == ListenAddress(host: "::1", port: 80))
        #expect(try ListenAddress.parse("4985", path: "i") == ListenAddress(host: "0.0.0.0", port: 4985))
        #expect(try ListenAddress.parse("localhost:1", path: "i") == ListenAddress(host: "localhost", port: 1))
    }
}
