"""Dynamic Resource Allocation (`resource.k8s.io/v1`) as kube-steer reads it: device classes,
the devices drivers publish in ResourceSlices, the claims pods hold, and what a pod asks for.

On a DRA cluster a GPU node lists no `nvidia.com/gpu` in `status.allocatable`; its GPUs are
devices in ResourceSlices, and a pod asks for them by a claim (a ResourceClaimTemplate or a
ResourceClaim) or by the extended resource a DeviceClass maps (`extendedResourceName`, or the
implicit `deviceclass.resource.kubernetes.io/<class>`). Pure data and logic: the watches that
fill these types live in the services.
"""
