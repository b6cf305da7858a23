import Foundation
import Logging
import SetteeDocument
import SetteeGateway
import SetteeJSON

func quietLogger() -> Logger {
    var l = Logger(label: "settee.gateway.test")
    l.logLevel = .critical
    return l
}

func json(_ text: String) -> JSON { try! JSON.parse(text) }

/// An embedded walrus bucket and a database on it, closed by `close()`.
struct Fixture {
    let bucket: EmbeddedBucket
    let db: GatewayDatabase

    static func open(_ options: DatabaseOptions = DatabaseOptions(name: "db")) async throws -> Fixture {
        let bucket = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let db = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        return Fixture(bucket: bucket, db: db)
    }

    func close() async {
        await db.close()
        await bucket.close()
    }
}
