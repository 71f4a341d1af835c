// The protocol: proto/spool/v1 loaded at run time from the copy packaged with
// the SDK (scripts/gen.js copies it from the repository at build time and
// generates the types in src/gen with the same options as LOADER_OPTIONS).
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import * as protobuf from "protobufjs";

import type { ProtoGrpcType as AdminProto } from "./gen/admin";
import type { ProtoGrpcType as HandlerProto } from "./gen/handler";
import type { ProtoGrpcType as PublisherProto } from "./gen/publisher";
import type { ProtoGrpcType as SubscriberProto } from "./gen/subscriber";

/** Directory of the packaged .proto files (proto/spool/v1/*.proto under it). */
export const PROTO_DIR = path.resolve(__dirname, "..", "proto");

// Must match the flags of proto-loader-gen-types in scripts/gen.js.
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

type Spool = AdminProto["spool"]["v1"] & HandlerProto["spool"]["v1"] & PublisherProto["spool"]["v1"] & SubscriberProto["spool"]["v1"];

let loaded: Spool | undefined;

/** The spool.v1 package: service constructors and message definitions. Loaded once. */
export function spoolv1(): Spool {
  if (!loaded) {
    const def = protoLoader.loadSync(
      ["spool/v1/admin.proto", "spool/v1/handler.proto", "spool/v1/publisher.proto", "spool/v1/subscriber.proto"],
      LOADER_OPTIONS,
    );
    loaded = (grpc.loadPackageDefinition(def) as unknown as { spool: { v1: Spool } }).spool.v1;
  }
  return loaded;
}

// google.rpc.Status and ErrorInfo, to read the grpc-status-details-bin
// trailer. Declared here (three small messages) rather than shipping
// googleapis' files.
const rpcRoot = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        protobuf: { nested: { Any: { fields: { type_url: { type: "string", id: 1 }, value: { type: "bytes", id: 2 } } } } },
        rpc: {
          nested: {
            Status: {
              fields: {
                code: { type: "int32", id: 1 },
                message: { type: "string", id: 2 },
                details: { rule: "repeated", type: "google.protobuf.Any", id: 3 },
              },
            },
            ErrorInfo: {
              fields: {
                reason: { type: "string", id: 1 },
                domain: { type: "string", id: 2 },
                metadata: { keyType: "string", type: "string", id: 3 } as protobuf.IField,
              },
            },
          },
        },
      },
    },
  },
});
export const RpcStatus = rpcRoot.lookupType("google.rpc.Status");
export const RpcErrorInfo = rpcRoot.lookupType("google.rpc.ErrorInfo");
export const ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo";

export type { Delivery__Output as Delivery } from "./gen/spool/v1/Delivery";
export type { DeliveryRef } from "./gen/spool/v1/DeliveryRef";
export type { SubscribeRequest } from "./gen/spool/v1/SubscribeRequest";
export type { SubscribeResponse__Output as SubscribeResponse } from "./gen/spool/v1/SubscribeResponse";
export type { PublishMessage } from "./gen/spool/v1/PublishMessage";
export type { Nack } from "./gen/spool/v1/Nack";
export type { HandleResponse } from "./gen/spool/v1/HandleResponse";
export type { AdminServiceClient } from "./gen/spool/v1/AdminService";
