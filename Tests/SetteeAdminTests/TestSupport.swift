import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport

let testNode = NodeInfo(
    otpNode: NodeID("n_0@127.0.0.1"), host: "127.0.0.1", adminPort: 9000, kvPort: 12000, viewsPort: 9500, nodeUUID: "")

var testLogger: Logger {
    var l = Logger(label: "settee.test")
    l.logLevel = .warning
    return l
}

func makeRegistry(_ dir: TemporaryDirectory) throws -> NodeRegistry {
    try NodeRegistry(dataDirectory: dir.path, node: testNode, logger: testLogger)
}

func settings(_ name: String, flush: Bool = false, auth: BucketSettings.AuthType = .sasl, vbuckets: Int = 1024)
    -> BucketSettings
{
    BucketSettings(
        name: name, uuid: String(repeating: "ab", count: 16), ramQuotaMB: 100, replicaNumber: 0, flushEnabled: flush,
        authType: auth, numVBuckets: vbuckets)
}

func jsonObject(_ bytes: [UInt8]) throws -> [String: Any]? {
    try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
