import Foundation
import Hummingbird
import Logging
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeRegistry

/// `GET/POST /settings/audit` and `GET /settings/audit/descriptors`, Couchbase's audit configuration (ADR 0148).
///
/// GET answers `{"auditdEnabled":B,"logPath":"DIR","rotateInterval":S,"rotateSize":N,"disabled":[ids],
/// "disabledUsers":[{"name":N,"domain":"local"|"external"|"gateway"}]}` (`logPath` is this node's directory when the
/// cluster's is unset). POST takes the same fields as a form, each optional (`disabled` a comma-separated id list,
/// `disabledUsers` a comma-separated `name/domain` list; an empty value clears either); a value out of range is
/// a 400 with `{"errors":{field: message}}`. The settings live in the cluster document (the orchestrator changes them
/// and every node applies them), and the change is itself audited: before it when auditing was on, after it when it
/// turns auditing on, so both ends of an off-period are recorded.
enum AuditRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI, cluster: ClusterManager?) {
        router.get("/settings/audit") { _, _ in
            AdminResponses.json(.ok, settingsJSON(api.registry.auditSettings, directory: api.registry.audit.directory))
        }
        router.get("/settings/audit/descriptors") { _, _ in
            AdminResponses.json(
                .ok,
                .array(
                    AuditEvent.Kind.allCases.map { k -> JSON in
                        [
                            "id": .int(k.rawValue), "name": .string(k.name), "description": .string(k.description),
                            "module": .string(k.rawValue >= 41984 ? "gateway" : "node"),
                        ]
                    }))
        }
        router.post("/settings/audit") { request, _ in await post(request, api: api) }
    }

    static func settingsJSON(_ s: AuditSettings, directory: String?) -> JSON {
        [
            "auditdEnabled": .bool(s.auditdEnabled), "logPath": .string(s.logPath ?? directory ?? ""),
            "rotateInterval": .int(s.rotateInterval), "rotateSize": .int(s.rotateSize),
            "disabled": .array(s.disabled.map { JSON.int($0) }),
            "disabledUsers": .array(
                s.disabledUsers.map { u -> JSON in ["name": .string(u.name), "domain": .string(u.domain)] }),
        ]
    }

    static func post(_ request: Request, api: AdminAPI) async -> Response {
        if let forwarded = await api.forwardToOrchestrator(request) { return forwarded }
        let form: FormBody
        switch await api.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        let old = api.registry.auditSettings
        var new = old
        var errors: [(String, String)] = []
        if let v = form["auditdEnabled"] {
            switch v {
            case "true": new.auditdEnabled = true
            case "false": new.auditdEnabled = false
            default: errors.append(("auditdEnabled", "The value must be one of the following: [true,false]"))
            }
        }
        if let v = form["rotateInterval"] {
            if let n = Int(v) {
                new.rotateInterval = n
            } else {
                errors.append(("rotateInterval", "The value must be an integer"))
            }
        }
        if let v = form["rotateSize"] {
            if let n = Int(v) {
                new.rotateSize = n
            } else {
                errors.append(("rotateSize", "The value must be an integer"))
            }
        }
        if let v = form["logPath"] {
            new.logPath = v.isEmpty ? nil : v
            if let path = new.logPath, path.hasPrefix("/") {
                var isDirectory: ObjCBool = false
                if !FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) || !isDirectory.boolValue
                    || !FileManager.default.isWritableFile(atPath: path)
                {
                    errors.append(("logPath", "The value must be a valid directory"))
                }
            }
        }
        if let v = form["disabled"] {
            let parts = v.split(separator: ",", omittingEmptySubsequences: true)
            let ids = parts.compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            if ids.count != parts.count {
                errors.append(("disabled", "The value must be a comma-separated list of event ids"))
            } else {
                new.disabled = Array(Set(ids)).sorted()
            }
        }
        if let v = form["disabledUsers"] {
            let parts = v.split(separator: ",", omittingEmptySubsequences: true)
            let users = parts.compactMap { AuditUser(formEntry: $0) }
            if users.count != parts.count {
                errors.append(
                    (
                        "disabledUsers",
                        "The value must be a comma-separated list of name/domain, the domain local, external or gateway"
                    ))
            } else {
                var seen = Set<AuditUser>()
                new.disabledUsers = users.filter { seen.insert($0).inserted }
            }
        }
        for (field, message) in new.errors where !errors.contains(where: { $0.0 == field }) {
            errors.append((field, message))
        }
        guard errors.isEmpty else { return AdminResponses.fieldErrors(errors) }
        let event = AuditCaller.event(
            .auditSettingsChanged,
            [
                ("old_settings", settingsJSON(old, directory: api.registry.audit.directory)),
                ("new_settings", settingsJSON(new, directory: nil)),
            ])
        if old.auditdEnabled { api.registry.audit.record(event) }
        let registry = api.registry
        let settings = new
        do {
            try await api.configChange { claim in try registry.updateAuditSettings(settings, claim: claim) }
        } catch let refused as ClusterRequestError {
            return AdminAPI.refusal(refused)
        } catch {
            api.logger.error("saving the audit settings failed", metadata: ["error": "\(error)"])
            return AdminResponses.general(.internalServerError, "Could not save the audit settings.")
        }
        if !old.auditdEnabled { api.registry.audit.record(event) }
        await api.publish()
        return AdminResponses.empty(.ok)
    }
}
